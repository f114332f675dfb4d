"""What the engine is asked and what it makes: a `Request` of branches, the
`Job` that runs it (every method safe from any thread: callers only mark
what they want, the engine's driver thread acts on it) and each branch's
`BranchRun` as it decodes; the `Decoder` a model context offers the engine
and the `Engine` the LLM layer hands requests to."""

from __future__ import annotations

import codecs
import enum
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from flask_app.inference.sampler import FirstStep, Logits, Sampling

State = npt.NDArray[np.float32]
# token, position, sequence, wants logits (and its hidden state)
Entry = tuple[int, int, int, bool]


class EngineError(RuntimeError):
    """Decoding failed (the message says how)."""


class ContextFull(EngineError):
    """The KV cache has no room for this request beside the others."""


class Decoder(Protocol):
    """What the engine needs from a model context (llama.cpp's, or a fake)."""

    def decode(
        self, entries: Sequence[Entry], layers: tuple[int, ...]
    ) -> dict[int, dict[int, State]]:
        """Decode `entries` as one batch; the hidden states of the entries
        that want logits at `layers` (layer -> entry index -> state).
        Raises ContextFull when the cache has no room (nothing decoded)."""
        ...

    def logits(self, index: int) -> Logits:
        """The logits of entry `index` of the last batch (a copy)."""
        ...

    def seq_rm(self, seq: int, start: int) -> None:
        """Forget sequence `seq` from position `start` on."""
        ...

    def seq_cp(self, source: int, target: int, end: int) -> None:
        """Give `target` the cells of `source` before position `end` (shared)."""
        ...

    def is_end(self, token: int) -> bool: ...

    def piece(self, token: int) -> bytes: ...


class Engine(Protocol):
    """What the LLM layer hands requests to: a `BatchEngine` here, or the
    cluster's engine that runs them on replicas."""

    n_seq: int  # sequences decoded at once
    cond: threading.Condition  # the lock its jobs share

    @property
    def waiting(self) -> int: ...

    @property
    def busy_seqs(self) -> int: ...

    @property
    def active(self) -> int: ...

    def submit(self, request: Request) -> Job: ...

    def release(self, job: Job) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Branch:
    sampling: Sampling
    max_tokens: int
    # stop after this many tokens and wait: `Job.keep_only` resumes it
    pause_at: int | None = None


@dataclass(frozen=True)
class Request:
    prompt: list[int]
    branches: tuple[Branch, ...]
    layers: tuple[int, ...] = ()  # hidden states read at the prompt's end and each token
    refusal_ids: tuple[int, ...] = ()  # first tokens a refusal starts with
    # sequences reserved beyond the branches, for branches spawned later
    spare: int = 0
    # each branch also keeps its state after this many of its tokens
    snapshots: tuple[int, ...] = ()
    # the prompt's leading tokens every request of its kind shares (the
    # system turn): read as a step of their own and kept for the next one
    stable: int = 0
    # read as on a fresh start when the model is idle (a conversation's
    # next turn instead keeps the cells of the turns before it)
    fresh: bool = True

    @property
    def seqs(self) -> int:
        return len(self.branches) + self.spare


class Finish(enum.Enum):
    STOP = "stop"  # the model ended it, or a stop string did
    LENGTH = "length"  # max_tokens
    PAUSED = "paused"  # pause_at, waiting for keep_only
    CLOSED = "closed"  # its job was closed or the branch dropped


@dataclass
class BranchRun:
    """One branch as it decodes; read it under the job's lock or once settled."""

    spec: Branch
    seq: int
    rng: np.random.Generator
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # of each drawn token (an end too)
    text: str = ""
    ends: list[int] = field(default_factory=list)  # where each token's text ends in `text`
    finish: Finish | None = None
    pending: int | None = None  # drawn, not yet decoded
    fed: int = 0  # of `tokens`, decoded into the cache
    # the state at the newest decoded token of the answer, by layer, and the
    # sum over its decoded tokens (for a mean)
    last_state: dict[int, State] = field(default_factory=dict)
    state_sum: dict[int, npt.NDArray[np.float64]] = field(default_factory=dict)
    # the state after n of its tokens, by n, for the request's snapshots
    snapshots: dict[int, dict[int, State]] = field(default_factory=dict)
    drawn: Counter[int] = field(default_factory=Counter)
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))
    emitted: int = 0  # characters of `text` handed out

    @property
    def settled(self) -> bool:
        return self.finish is not None

    def take(self, token: int, logprob: float, piece: bytes, end: bool) -> None:
        """The token just drawn: its text, and whether the branch goes on
        (an end token, a stop string, max_tokens, or its pause point)."""
        self.logprobs.append(logprob)
        if end:
            self.text += self.decoder.decode(b"", final=True)
            self.ends.append(len(self.text))
            self.pending = None
            self.finish = Finish.STOP
            return
        self.tokens.append(token)
        self.drawn[token] += 1
        self.text += self.decoder.decode(piece)
        self.ends.append(len(self.text))
        for stop in self.spec.sampling.stop:
            at = self.text.find(stop, max(0, self.emitted - len(stop)))
            if at >= 0:
                self.text = self.text[:at]
                self.ends = [e for e in self.ends if e < at] + [at]
                self.pending = None
                self.finish = Finish.STOP
                return
        self.pending = token
        if len(self.tokens) >= self.spec.max_tokens:
            self.finish = Finish.LENGTH
            self.pending = None
        elif self.spec.pause_at is not None and len(self.tokens) == self.spec.pause_at:
            self.finish = Finish.PAUSED

    def mean_state(self, layer: int) -> State | None:
        total = self.state_sum.get(layer)
        return None if total is None or not self.fed else (total / self.fed).astype(np.float32)


class Job:
    """A request as the engine runs it. Every method is safe from any thread."""

    def __init__(self, engine: Engine, request: Request) -> None:
        self._engine = engine
        self.request = request
        self.cond = engine.cond  # one lock for the engine and its jobs
        self.admitted = False
        self.read = 0  # prompt tokens in the cache
        self.seqs: list[int] = []  # reserved at admission; the first reads the prompt
        self.first: FirstStep | None = None
        self.first_logits: Logits | None = None  # kept for branches spawned later
        self.prompt_state: dict[int, State] = {}
        self.branches: list[BranchRun] = []
        self.spawning: list[Branch] = []  # asked for, forked at the next step
        self.error: BaseException | None = None
        self.closed = False
        self.submitted = time.monotonic()
        self.prefilled_at: float | None = None

    @property
    def prefilled(self) -> bool:
        return self.first is not None

    # --- waiting ------------------------------------------------------------------

    def _wait(self, ready: Any, deadline: float | None) -> bool:
        """Until `ready()`; False when `deadline` passed first; the job's
        error, when it failed before it was ready."""
        with self.cond:
            while not ready():
                if self.error is not None:
                    raise self.error
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self.cond.wait(0.25 if remaining is None else min(remaining, 0.25))
            return True

    def wait_admitted(self, deadline: float | None) -> bool:
        """Admitted (what happened since is for the later waits to tell)."""
        return self._wait(lambda: self.admitted or self.closed, deadline)

    def wait_prefilled(self, deadline: float | None) -> bool:
        # read before a failure: what was written then is still handed out
        return self._wait(lambda: self.prefilled or (self.closed and self.error is None), deadline)

    def wait_settled(self, deadline: float | None) -> bool:
        """Every branch ended or paused (False: the deadline came first)."""
        return self._wait(
            lambda: (
                self.error is None
                and (
                    self.closed
                    or (
                        bool(self.branches)
                        and not self.spawning
                        and all(b.settled for b in self.branches)
                    )
                )
            ),
            deadline,
        )

    def pieces(
        self, index: int, deadline: float | None, stop: Callable[[], bool] | None = None
    ) -> Iterator[str]:
        """Branch `index`'s text as it comes, from where the last call left
        off; ends where the branch ends or pauses, or when `stop()` (asked
        between waits) turns true. TimeoutError when `deadline` passes first."""
        while True:
            with self.cond:
                while True:
                    if stop is not None and stop():
                        return
                    run = self.branches[index] if index < len(self.branches) else None
                    if run is not None:
                        # one token's text at a time, short of a possible stop
                        # string (what was written before a failure goes first)
                        safe = _safe_length(run)
                        end = next((e for e in run.ends if e > run.emitted), len(run.text))
                        end = min(end, safe)
                        # a branch that ended on its own is handed out whole,
                        # even once its job closed (a replica closes a job
                        # whose branches all ended)
                        whole = run.finish in (Finish.STOP, Finish.LENGTH)
                        if end > run.emitted and (
                            self.error is not None or not self.closed or whole
                        ):
                            piece = run.text[run.emitted : end]
                            run.emitted = end
                            break
                    if self.error is not None:
                        raise self.error
                    if self.closed or (run is not None and run.settled):
                        return
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError("the generation passed its deadline")
                    self.cond.wait(0.25 if remaining is None else min(remaining, 0.25))
            yield piece

    # --- steering --------------------------------------------------------------------

    def spawn(self, branches: Sequence[Branch]) -> None:
        """More branches from the same prompt, on the spare sequences."""
        with self.cond:
            if any(run.finish is Finish.CLOSED for run in self.branches):
                raise ValueError("one branch was chosen: its dropped sequences are given back")
            if (
                len(self.branches) + len(self.spawning) + len(branches)
                > len(self.request.branches) + self.request.spare
            ):
                raise ValueError("more branches than the request reserved sequences for")
            self.spawning += branches
            self.cond.notify_all()

    def keep_only(self, index: int) -> None:
        """Drop every branch but `index` (their sequences are freed) and let
        `index` go on if it paused."""
        with self.cond:
            self.spawning = []  # asked for, not forked yet: never written
            for i, run in enumerate(self.branches):
                if i != index and run.finish in (None, Finish.PAUSED):
                    run.finish = Finish.CLOSED
            run = self.branches[index]
            if run.finish is Finish.PAUSED:
                run.finish = None
            self._engine.release(self)
            self.cond.notify_all()

    def close(self) -> None:
        """Stop everything; the sequences go back to the engine at its next step."""
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.spawning = []
            for run in self.branches:
                if run.finish in (None, Finish.PAUSED):
                    run.finish = Finish.CLOSED
            self._engine.release(self)
            self.cond.notify_all()


def _safe_length(run: BranchRun) -> int:
    """How much of `run.text` can be handed out: all once the branch ended,
    else all but a tail that may begin a stop string."""
    if run.settled:
        return len(run.text)
    hold = 0
    for stop in run.spec.sampling.stop:
        for k in range(min(len(stop) - 1, len(run.text)), 0, -1):
            if run.text.endswith(stop[:k]):
                hold = max(hold, k)
                break
    return max(run.emitted, len(run.text) - hold)
