"""A request's branches as the caller sees them: `Generation` waits on the
job with the request's deadline and its client in mind, `Candidate` is a
branch once it stopped, `TokenStream` one branch's deltas as they come."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from flask_app.inference.errors import LLMCancelled, LLMError, LLMFailed, LLMOverloaded, LLMTimeout
from flask_app.inference.job import Branch, BranchRun, ContextFull, EngineError, Finish, Job
from flask_app.inference.sampler import FirstStep, Sampling

State = npt.NDArray[np.float32]

# How often a waiter and a generation look whether their client is still there.
_ABANDON_POLL_S = 0.25


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
