"""The model behind the API: requests wait for sequences, in arrival order,
with deadlines and a bounded queue; each becomes a `Generation` of one or
more branches decoded together with everyone else's (`engine.BatchEngine`).

A full queue raises `LLMOverloaded` (the API answers 503 + Retry-After),
every request has a deadline, a client that leaves while waiting gives its
place up, and a stream closed early (client gone) stops its branches and
hands their sequences to the next request at the engine's next step.
"""

from __future__ import annotations

import functools
import math
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict

from flask_app.inference.engine import Branch, Engine, Request
from flask_app.inference.errors import LLMCancelled, LLMFailed, LLMOverloaded, LLMTimeout
from flask_app.inference.generation import Candidate, Generation, Observer, TokenStream
from flask_app.inference.sampler import DEFAULT as DEFAULT_SAMPLING
from flask_app.inference.sampler import Sampling
from flask_app.inference.sequences import shared_start
from flask_app.malloc_tuning import release_free_memory

__all__ = [
    "LLM",
    "Ask",
    "Candidate",
    "ChatMessage",
    "Generation",
    "Observer",
    "Sampling",
    "TokenStream",
]


class ChatMessage(TypedDict):
    role: str
    content: str


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


class Slots:
    """How busy the model is, for /status, metrics and the ingestion worker.
    It reads the engine and backend, and its LLM only weakly (its queue's
    size): the LLM owns it, so no cycle keeps the LLM alive."""

    def __init__(self, llm: LLM) -> None:
        self._engine = llm.engine
        self._backend = llm.backend
        self._owner = weakref.ref(llm)

    @property
    def waiting(self) -> int:
        return self._engine.waiting

    @property
    def busy(self) -> bool:
        """No request could start now: every sequence is taken, or some wait."""
        engine = self._engine
        return engine.busy_seqs >= engine.n_seq or engine.waiting > 0

    @property
    def holders(self) -> int:
        return self._engine.active

    @property
    def capacity(self) -> int:
        return self._engine.n_seq

    @property
    def max_waiters(self) -> int:
        llm = self._owner()
        return 0 if llm is None else llm.max_waiters

    @property
    def replicas(self) -> int:
        return self._backend.replica_count


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
        # the tokens of a prompt's system turn, by that turn, and of the
        # refusal starts, by those starts (lru_cache locks: requests arrive on
        # many threads); over the backend alone, so the LLM is in no cycle
        self._turns_tokens = functools.lru_cache(maxsize=32)(
            functools.partial(_tokens_of_turns, backend)
        )
        self._refusal_tokens = functools.lru_cache(maxsize=8)(
            functools.partial(_first_tokens_of, backend)
        )

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
        # a conversation's earlier turns: kept from its last turn, not read again
        fresh = all(m["role"] == "system" for m in messages[:-1])
        stable = self._stable_start(prompt, messages) if fresh else 0
        first = Branch(ask.sampling, ask.max_tokens, ask.pause_at)
        more = Branch(sample_sampling or ask.sampling, ask.max_tokens, ask.pause_at)
        request = Request(
            prompt=prompt,
            branches=(first, *[more] * samples),
            layers=ask.layers,
            refusal_ids=self._refusal_tokens(ask.refusal_starts),
            spare=ask.spare,
            stable=stable,
            fresh=fresh,
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

    def _stable_start(self, prompt: list[int], messages: Sequence[ChatMessage]) -> int:
        """How many of `prompt`'s tokens come before its last message (the
        system turn)."""
        if len(messages) < 2:
            return 0
        turns = tuple((m["role"], m["content"]) for m in messages[:-1])
        return shared_start(prompt, self._turns_tokens(turns))

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


def _tokens_of_turns(backend: Backend, turns: tuple[tuple[str, str], ...]) -> tuple[int, ...]:
    messages: list[ChatMessage] = [{"role": r, "content": c} for r, c in turns]
    return tuple(backend.tokens(backend.render(messages)))


def _first_tokens_of(backend: Backend, starts: tuple[str, ...]) -> tuple[int, ...]:
    return backend.first_tokens(starts) if starts else ()
