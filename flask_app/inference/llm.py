"""The model behind the API: requests wait for sequences, in arrival order,
with deadlines and a bounded queue; each becomes a `Generation` of one or
more branches decoded together with everyone else's (`engine.BatchEngine`).

A full queue raises `LLMOverloaded` (the API answers 503 + Retry-After),
every request has a deadline, a client that leaves while waiting gives its
place up, and a stream closed early (client gone) stops its branches and
hands their sequences to the next request at the engine's next step.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict

import numpy as np
import numpy.typing as npt

from flask_app.errors import Kind, ServiceError
from flask_app.inference.engine import (
    Branch,
    BranchRun,
    ContextFull,
    Engine,
    EngineError,
    Finish,
    Job,
    Request,
)
from flask_app.inference.sampler import DEFAULT as DEFAULT_SAMPLING
from flask_app.inference.sampler import FirstStep, Sampling
from flask_app.malloc_tuning import release_free_memory

__all__ = ["LLM", "Ask", "Candidate", "ChatMessage", "Generation", "Sampling", "TokenStream"]

State = npt.NDArray[np.float32]


class ChatMessage(TypedDict):
    role: str
    content: str


class LLMError(ServiceError):
    """Base of every error the LLM layer raises."""

    kind = Kind.MODEL_FAILED


class LLMOverloaded(LLMError):
    """The wait queue is full (or the context window is); try again after
    `retry_after` seconds."""

    kind = Kind.BUSY
    retry_after: int

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(f"{detail}; retry in {retry_after} s")
        self.retry_after = retry_after


class ReplicaLost(LLMError):
    """A model replica of the cluster died (Ray restarts it): retry shortly."""

    kind = Kind.UNAVAILABLE

    def __init__(self, detail: str, retry_after: int = 5) -> None:
        super().__init__(f"a model replica failed ({detail}); retry in {retry_after} s")
        self.retry_after = retry_after


class LLMTimeout(LLMError):
    """The request's deadline passed while waiting or generating."""

    kind = Kind.TIMEOUT


class LLMFailed(LLMError):
    """The model raised while generating (the detail is for the log)."""

    kind = Kind.MODEL_FAILED

    @property
    def public_message(self) -> str:
        return "LLM request failed"


class LLMCancelled(LLMError):
    """The client left while its request waited for the model."""

    kind = Kind.CANCELLED


# How often a waiter and a generation look whether their client is still there.
_ABANDON_POLL_S = 0.25


class Backend(Protocol):
    """What `LLM` needs from a model: its tokenizer and chat template, and
    the engine that decodes its sequences."""

    @property
    def model_id(self) -> str: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def engine(self) -> Engine | None: ...

    @property
    def replica_count(self) -> int:
        """Model copies behind the engine (1 but on a cluster)."""
        ...

    def tokens(self, text: str) -> list[int]: ...

    def count_tokens(self, text: str) -> int: ...

    def first_tokens(self, words: Sequence[str]) -> tuple[int, ...]: ...

    def render(self, messages: Sequence[ChatMessage]) -> str: ...


@dataclass(frozen=True)
class Ask:
    """One generation: its branches (the first drawn with `sampling`, the
    `samples` others with `sample_sampling`), how long each may run, where
    each pauses for a choice, and what is read from the model on the way."""

    max_tokens: int = 256
    sampling: Sampling = DEFAULT_SAMPLING
    # branches added later with `Generation.spawn` (sequences kept for them)
    spare: int = 0
    pause_at: int | None = None  # each branch waits here for `Generation.stream`
    layers: tuple[int, ...] = ()  # hidden states: the prompt's last token, each branch's
    refusal_starts: tuple[str, ...] = ()  # the first step's refusal probability


@dataclass(frozen=True)
class Candidate:
    """One branch once it ended or paused."""

    index: int
    text: str
    finish: Finish
    tokens: int
    logprobs: tuple[float, ...]
    last_state: dict[int, State]  # at its last decoded token, by layer
    mean_state: dict[int, State]  # over its decoded tokens, by layer

    @classmethod
    def of(cls, index: int, run: BranchRun) -> Candidate:
        means = {layer: run.mean_state(layer) for layer in run.state_sum}
        return cls(
            index=index,
            text=run.text,
            finish=run.finish or Finish.CLOSED,
            tokens=len(run.tokens),
            logprobs=tuple(run.logprobs),
            last_state=dict(run.last_state),
            mean_state={k: v for k, v in means.items() if v is not None},
        )


# Told about every finished generation: (prompt tokens, seconds queued for the
# model, seconds to the first delta or None, deltas generated, seconds the
# model was held). Metrics use it.
Observer = Callable[[int, float, float | None, int, float], None]


class Generation:
    """A request's branches as they decode. Every wait honours the request's
    deadline (LLMTimeout) and its client (LLMCancelled when it left)."""

    def __init__(
        self,
        job: Job,
        deadline: float,
        abandoned: Callable[[], bool] | None,
        on_close: Callable[[Generation], None],
    ) -> None:
        self._job = job
        self._deadline = deadline
        self._abandoned = abandoned
        self._on_close = on_close
        self._next_poll = 0.0
        self.started = time.monotonic()
        self.first_delta: float | None = None
        self.deltas = 0
        self.prompt_tokens = len(job.request.prompt)
        self.waited = 0.0
        self.cancelled_because_client_left = False
        self._closed = False

    @property
    def job(self) -> Job:
        return self._job

    def client_gone(self) -> bool:
        if self._abandoned is None:
            return False
        now = time.monotonic()
        if now < self._next_poll:
            return False
        self._next_poll = now + _ABANDON_POLL_S
        if self._abandoned():
            self.cancelled_because_client_left = True
            return True
        return False

    def _await(self, wait: Callable[[float | None], bool], what: str) -> None:
        """Wait in short slices, looking for a departed client between them."""
        while True:
            if self.client_gone():
                self.close()
                raise LLMCancelled(f"the client left while {what}")
            slice_end = min(self._deadline, time.monotonic() + _ABANDON_POLL_S)
            try:
                if wait(slice_end):
                    return
            except ContextFull as exc:
                self.close()
                raise LLMOverloaded(str(exc), 2) from exc
            except EngineError as exc:
                self.close()
                raise LLMFailed(f"LLM request failed: {exc}") from exc
            if time.monotonic() >= self._deadline:
                self.close()
                raise LLMTimeout(f"the LLM request passed its deadline while {what}")

    def reading(self) -> tuple[FirstStep, dict[int, State]]:
        """The first step's distribution and the prompt's last hidden states."""
        self._await(self._job.wait_prefilled, "its prompt was read")
        assert self._job.first is not None
        return self._job.first, dict(self._job.prompt_state)

    def settle(self) -> list[Candidate]:
        """Every branch once it ended or paused."""
        self._await(self._job.wait_settled, "its answers were written")
        with self._job.cond:
            return [Candidate.of(i, run) for i, run in enumerate(self._job.branches)]

    def spawn(self, count: int, sampling: Sampling, max_tokens: int, pause_at: int | None) -> None:
        self._job.spawn([Branch(sampling, max_tokens, pause_at)] * count)

    def stream(self, index: int = 0) -> Iterator[str]:
        """Branch `index`'s text from where it was last handed out to its
        end (the other branches are dropped; a paused one goes on)."""
        if self._job.branches:
            self._job.keep_only(index)
        try:
            for piece in self._job.pieces(index, self._deadline, self.client_gone):
                if self.first_delta is None:
                    self.first_delta = time.monotonic()
                self.deltas += 1
                yield piece
        except TimeoutError:
            self.close()
            raise LLMTimeout("the LLM request exceeded its deadline") from None
        except ContextFull as exc:
            self.close()
            raise LLMOverloaded(str(exc), 2) from exc
        except EngineError as exc:
            self.close()
            raise LLMFailed(f"LLM request failed: {exc}") from exc
        if self.cancelled_because_client_left:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._job.close()
        self._on_close(self)


class TokenStream:
    """Text deltas of one branch; closing it (or a client gone) stops it."""

    def __init__(self, generation: Generation, index: int = 0) -> None:
        self.generation = generation
        self._pieces = generation.stream(index)
        self._cancelled = threading.Event()

    @property
    def cancelled_because_client_left(self) -> bool:
        return self.generation.cancelled_because_client_left

    def __iter__(self) -> TokenStream:
        return self

    def __next__(self) -> str:
        if self._cancelled.is_set():
            self.close()
            raise StopIteration
        try:
            return next(self._pieces)
        except StopIteration:
            self.close()
            raise
        except LLMError:
            self.close()
            raise

    def cancel(self) -> None:
        """Stop at the next delta (safe from any thread)."""
        self._cancelled.set()

    def close(self) -> None:
        self.generation.close()

    def __enter__(self) -> TokenStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Slots:
    """How busy the model is, for /status, metrics and the ingestion worker."""

    def __init__(self, llm: LLM) -> None:
        self._llm = llm

    @property
    def waiting(self) -> int:
        return self._llm.engine.waiting

    @property
    def busy(self) -> bool:
        """No request could start now: every sequence is taken, or some wait."""
        engine = self._llm.engine
        return engine.busy_seqs >= engine.n_seq or engine.waiting > 0

    @property
    def holders(self) -> int:
        return self._llm.engine.active

    @property
    def capacity(self) -> int:
        return self._llm.engine.n_seq

    @property
    def max_waiters(self) -> int:
        return self._llm.max_waiters

    @property
    def replicas(self) -> int:
        return self._llm.backend.replica_count


class LLM:
    """The model behind the API: queueing, deadlines, branches and token counting."""

    def __init__(
        self,
        backend: Backend,
        *,
        max_waiters: int = 8,
        timeout: float = 120.0,
        preset: str | None = None,
    ) -> None:
        if backend.engine is None:
            raise ValueError("this backend cannot generate (it was loaded vocab-only)")
        self.backend = backend
        self.engine: Engine = backend.engine
        self.preset = preset  # the named model served (None: a --model file)
        self.max_waiters = max_waiters
        self.timeout = timeout
        self.observer: Observer | None = None
        self.slots = Slots(self)
        self._mean_hold = 5.0  # seconds; moving average of a generation, seeds Retry-After
        self._refusal_ids: dict[tuple[str, ...], tuple[int, ...]] = {}

    @property
    def model_id(self) -> str:
        return self.backend.model_id

    @property
    def n_ctx(self) -> int:
        return self.backend.n_ctx

    def count_tokens(self, text: str) -> int:
        return self.backend.count_tokens(text)

    def count_chat_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """Tokens the rendered prompt occupies in the context window."""
        return self.backend.count_tokens(self.backend.render(messages))

    def retry_after(self) -> int:
        return max(1, math.ceil(self._mean_hold * (self.engine.waiting + 1) / self.engine.n_seq))

    def generate(
        self,
        messages: Sequence[ChatMessage],
        ask: Ask = Ask(),
        *,
        samples: int = 0,
        sample_sampling: Sampling | None = None,
        timeout: float | None = None,
        abandoned: Callable[[], bool] | None = None,
    ) -> Generation:
        """Wait (FIFO) for the sequences `ask` needs, then start it: a first
        branch drawn with `ask.sampling` and `samples` more with
        `sample_sampling`, all from one read of the prompt.

        Raises `LLMOverloaded` at once when the queue is full, `LLMTimeout`
        when the deadline passes before sequences are free, and
        `LLMCancelled` when `abandoned()` turns true while waiting.
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        prompt = self.backend.tokens(self.backend.render(messages))
        first = Branch(ask.sampling, ask.max_tokens, ask.pause_at)
        more = Branch(sample_sampling or ask.sampling, ask.max_tokens, ask.pause_at)
        request = Request(
            prompt=prompt,
            branches=(first, *[more] * samples),
            layers=ask.layers,
            refusal_ids=self._refusal_tokens(ask.refusal_starts),
            spare=ask.spare,
        )
        if request.seqs > self.engine.n_seq:
            raise ValueError(
                f"{request.seqs} branches; the model decodes at most {self.engine.n_seq}"
            )
        engine = self.engine
        if engine.waiting >= self.max_waiters and engine.busy_seqs + request.seqs > engine.n_seq:
            raise LLMOverloaded(
                f"LLM queue is full ({engine.waiting} requests waiting)", self.retry_after()
            )
        queued = time.monotonic()
        try:
            job = engine.submit(request)
        except ValueError as exc:
            raise LLMFailed(f"LLM request failed: {exc}") from exc
        generation = Generation(job, deadline, abandoned, self._closed)
        try:
            generation._await(job.wait_admitted, "waiting for the LLM")
        except LLMTimeout:
            raise LLMTimeout("timed out waiting for the LLM") from None
        except LLMCancelled:
            raise LLMCancelled("the client left while waiting for the LLM") from None
        generation.waited = time.monotonic() - queued
        generation.started = time.monotonic()
        return generation

    def _refusal_tokens(self, starts: tuple[str, ...]) -> tuple[int, ...]:
        if starts not in self._refusal_ids:
            self._refusal_ids[starts] = self.backend.first_tokens(starts) if starts else ()
        return self._refusal_ids[starts]

    def _closed(self, generation: Generation) -> None:
        held = time.monotonic() - generation.started
        self._mean_hold = 0.8 * self._mean_hold + 0.2 * held
        release_free_memory()  # a generation's temporaries, back to the system
        if self.observer is not None:
            first = generation.first_delta
            ttft = None if first is None else first - generation.started
            self.observer(
                generation.prompt_tokens, generation.waited, ttft, generation.deltas, held
            )

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int = 256,
        sampling: Sampling = DEFAULT_SAMPLING,
        timeout: float | None = None,
        abandoned: Callable[[], bool] | None = None,
    ) -> TokenStream:
        """One answer's deltas as they are written (see `generate`)."""
        ask = Ask(max_tokens=max_tokens, sampling=sampling)
        return TokenStream(self.generate(messages, ask, timeout=timeout, abandoned=abandoned))

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int = 256,
        sampling: Sampling = DEFAULT_SAMPLING,
        timeout: float | None = None,
    ) -> str:
        with self.stream(
            messages, max_tokens=max_tokens, sampling=sampling, timeout=timeout
        ) as tokens:
            return "".join(tokens)

    def close(self) -> None:
        self.engine.stop()
