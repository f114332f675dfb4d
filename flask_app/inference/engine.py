"""One model context decoding many sequences together (continuous batching).

A `Request` is a prompt and one or more `Branch`es: the answer candidates
of one question, or one client's single answer. Its prompt is read once,
into one sequence of the KV cache; at its last token every branch forks
from it (`seq_cp`: the cells are shared, not copied) and draws its first
token from the same logits. A branch added later (`Job.spawn`) forks from
the same cells and draws from the same first logits, as if it had been
there from the start. Each step of the driver thread decodes, in one
batch, the newest token of every branch of every admitted request plus a
chunk of the prompt of the oldest request still reading, so requests join
between steps and a long prompt does not stall answers already streaming.

Sequences are the slots: a request is admitted, in arrival order, when the
sequences it reserves are free. A free sequence keeps what it held, so the
next prompt starts from the longest start it shares with one (the system
prompt, the same passages) and only the rest is read. Hidden states are
read where they are computed anyway: at the prompt's last token, and at
each branch's newest token.

Every call into the model happens on the driver thread; callers only mark
what they want (`close`, `keep_only`, `spawn`) and wait on the lock.
"""

from __future__ import annotations

import codecs
import enum
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from flask_app.inference import sampler
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
        return self._wait(
            lambda: self.prefilled or (self.closed and self.error is None), deadline
        )

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
                        if end > run.emitted and (self.error is not None or not self.closed):
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


def _shared_start(a: Sequence[int], b: Sequence[int]) -> int:
    n, most = 0, min(len(a), len(b))
    while n < most and a[n] == b[n]:
        n += 1
    return n


@dataclass
class _Owner:
    job: Job
    run: BranchRun | None  # None: the prompt's last token


@dataclass
class _Plan:
    entries: list[Entry]
    owners: list[_Owner | None]
    layers: tuple[int, ...]
    reading: Job | None = None  # whose prompt tokens are in the batch
    n_read: int = 0


class BatchEngine:
    """The driver thread of one model context with `n_seq` sequences."""

    def __init__(
        self, decoder: Decoder, *, n_seq: int, n_batch: int, prompt_chunk: int = 128
    ) -> None:
        self._decoder = decoder
        self.n_seq = n_seq
        self._n_batch = n_batch
        self.prompt_chunk = prompt_chunk
        self.cond = threading.Condition()
        self._queue: deque[Job] = deque()  # waiting for sequences, in arrival order
        self._jobs: list[Job] = []  # admitted
        self._free = list(range(n_seq))
        self._held: dict[int, list[int]] = {s: [] for s in range(n_seq)}  # tokens in each seq
        self._stopping = False
        self.steps = 0  # batches decoded
        self.prompt_tokens_read = 0  # prompt tokens decoded (not found in the cache)
        self._thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)
        self._thread.start()

    # --- the callers' side -------------------------------------------------------

    @property
    def waiting(self) -> int:
        with self.cond:
            return len(self._queue)

    @property
    def busy_seqs(self) -> int:
        with self.cond:
            return self.n_seq - len(self._free)

    @property
    def active(self) -> int:
        with self.cond:
            return len(self._jobs)

    def submit(self, request: Request) -> Job:
        if not request.prompt:
            raise ValueError("an empty prompt")
        if not 1 <= request.seqs <= self.n_seq:
            raise ValueError(f"a request may hold 1..{self.n_seq} sequences, not {request.seqs}")
        job = Job(self, request)
        with self.cond:
            self._queue.append(job)
            self.cond.notify_all()
        return job

    def stop(self) -> None:
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        self._thread.join(timeout=10)

    # --- the driver thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self.cond:
                self._tidy()
                while not self._stopping and not self._has_work():
                    self.cond.wait()
                    self._tidy()
                if self._stopping:
                    return
                plan = self._plan()
            try:
                self._step(plan)
            except Exception as exc:
                failure = exc if isinstance(exc, EngineError) else EngineError(str(exc))
                with self.cond:
                    jobs = {o.job for o in plan.owners if o is not None}
                    if plan.reading is not None:
                        jobs.add(plan.reading)
                    if isinstance(failure, ContextFull) and self._forget_free_seqs():
                        continue  # room made: the same batch goes again
                    if isinstance(failure, ContextFull) and jobs:
                        jobs = {max(jobs, key=lambda j: j.submitted)}  # the newest gives way
                    for job in jobs or set(self._jobs):
                        self._fail(job, failure)
                    self.cond.notify_all()

    def _fail(self, job: Job, error: BaseException) -> None:
        job.error = error
        job.closed = True
        for run in job.branches:
            run.finish = run.finish or Finish.CLOSED
        self.release(job)

    def _forget_free_seqs(self) -> bool:
        """(under the lock) Drop what free sequences still hold; False when
        they held nothing."""
        forgot = False
        for seq in self._free:
            if self._held[seq]:
                self._decoder.seq_rm(seq, 0)
                self._held[seq] = []
                forgot = True
        return forgot

    def _has_work(self) -> bool:
        if self._queue and len(self._free) >= self._queue[0].request.seqs:
            return True
        return any(
            job.spawning or self._reading(job) or any(self._decoding(r) for r in job.branches)
            for job in self._jobs
            if not job.closed
        )

    @staticmethod
    def _reading(job: Job) -> bool:
        return not job.closed and job.read < len(job.request.prompt)

    @staticmethod
    def _decoding(run: BranchRun) -> bool:
        return run.finish is None and run.pending is not None

    def release(self, job: Job) -> None:
        """(under the lock) Free the sequences of `job`'s dropped branches,
        and all of them once it is closed (bookkeeping only: no model call,
        so any thread may do it)."""
        used = {run.seq for run in job.branches}
        for run in job.branches:
            if (job.closed or run.finish is Finish.CLOSED) and run.seq >= 0:
                self._free_seq(run.seq)
                run.seq = -1
        if job.closed and job in self._jobs:
            for seq in job.seqs:
                if seq not in used:  # the prompt's, before it forked; spares
                    self._free_seq(seq)
            self._jobs.remove(job)
        if job.closed and job in self._queue:
            self._queue.remove(job)

    def _tidy(self) -> None:
        """(under the lock, on the driver thread) Fork spawned branches and
        admit waiting jobs in order."""
        for job in list(self._jobs):
            self.release(job)
            if not job.closed and job.spawning and job.first_logits is not None:
                self._fork(job, job.spawning)
                job.spawning = []
        while self._queue and len(self._free) >= self._queue[0].request.seqs:
            self._admit(self._queue.popleft())

    def _free_seq(self, seq: int) -> None:
        if seq not in self._free:
            self._free.append(seq)

    def _admit(self, job: Job) -> None:
        """(under the lock) Give `job` its sequences; its prompt starts from
        the longest start any sequence holds (a free one's, or shared with
        one in use)."""
        prompt = job.request.prompt
        head = prompt[:-1]  # the last token is always read, for its logits
        best = max(self._free, key=lambda s: _shared_start(self._held[s], head))
        self._free.remove(best)
        start = _shared_start(self._held[best], head)
        busy = [s for s in range(self.n_seq) if s not in self._free and s != best]
        donor = max(busy, key=lambda s: _shared_start(self._held[s], head), default=None)
        donated = 0 if donor is None else _shared_start(self._held[donor], head)
        if donor is not None and donated > start:
            self._decoder.seq_rm(best, 0)
            self._decoder.seq_cp(donor, best, donated)
            start = donated
        else:
            self._decoder.seq_rm(best, start)
        self._held[best] = prompt[:start]
        # the other sequences: those holding least (the others' starts stay)
        others = sorted(self._free, key=lambda s: len(self._held[s]))[: job.request.seqs - 1]
        for seq in others:
            self._free.remove(seq)
        job.seqs = [best, *others]
        job.read = start
        job.admitted = True
        self._jobs.append(job)
        self.cond.notify_all()

    def _plan(self) -> _Plan:
        """(under the lock) The next batch: each decoding branch's pending
        token, then a chunk of the oldest prompt still being read."""
        entries: list[Entry] = []
        owners: list[_Owner | None] = []
        layers: set[int] = set()
        for job in self._jobs:
            for run in job.branches:
                if self._decoding(run):
                    assert run.pending is not None
                    entries.append((run.pending, len(job.request.prompt) + run.fed, run.seq, True))
                    owners.append(_Owner(job, run))
                    layers.update(job.request.layers)
        reading = next((job for job in self._jobs if self._reading(job)), None)
        if reading is None:
            return _Plan(entries, owners, tuple(sorted(layers)))
        room = self._n_batch - len(entries)
        chunk = min(room, self.prompt_chunk) if entries else room
        prompt = reading.request.prompt
        part = prompt[reading.read : reading.read + chunk]
        for i, token in enumerate(part):
            last = reading.read + i == len(prompt) - 1
            entries.append((token, reading.read + i, reading.seqs[0], last))
            owners.append(_Owner(reading, None) if last else None)
            if last:
                layers.update(reading.request.layers)
        return _Plan(entries, owners, tuple(sorted(layers)), reading, len(part))

    def _step(self, plan: _Plan) -> None:
        if not plan.entries:
            return
        states = self._decoder.decode(plan.entries, plan.layers)
        self.steps += 1
        with self.cond:
            reading = plan.reading
            if reading is not None:
                self.prompt_tokens_read += plan.n_read
                if not reading.closed:
                    reading.read += plan.n_read
                    self._held[reading.seqs[0]] = reading.request.prompt[: reading.read]
            for i, owner in enumerate(plan.owners):
                if owner is None or owner.job.closed:
                    continue
                rows = {layer: states[layer][i] for layer in states if i in states[layer]}
                if owner.run is None:
                    self._prefilled(owner.job, self._decoder.logits(i), rows)
                    continue
                run = owner.run
                run.fed += 1
                if run.seq >= 0:
                    self._held[run.seq] = [*owner.job.request.prompt, *run.tokens[: run.fed]]
                for layer, row in rows.items():
                    run.last_state[layer] = row
                    run.state_sum[layer] = run.state_sum.get(layer, 0.0) + row.astype(np.float64)
                if rows and run.fed in owner.job.request.snapshots:
                    run.snapshots[run.fed] = dict(rows)
                if run.finish is None:
                    self._advance(run, self._decoder.logits(i))
            self.cond.notify_all()

    def _prefilled(self, job: Job, logits: Logits, rows: dict[int, State]) -> None:
        """(under the lock) The prompt's last token is read: fork the branches."""
        job.read = len(job.request.prompt)
        job.prefilled_at = time.monotonic()
        job.first = sampler.first_step(logits, list(job.request.refusal_ids))
        job.first_logits = logits
        job.prompt_state = rows
        self._fork(job, job.request.branches)

    def _fork(self, job: Job, branches: Sequence[Branch]) -> None:
        """(under the lock) `branches` from the prompt's cells, each with its
        first token drawn from the prompt's logits."""
        assert job.first_logits is not None
        prompt = job.request.prompt
        for spec in branches:
            k = len(job.branches)
            seq = job.seqs[k]
            if k > 0:
                self._decoder.seq_rm(seq, 0)
                self._decoder.seq_cp(job.seqs[0], seq, len(prompt))
            seed = spec.sampling.seed
            run = BranchRun(
                spec=spec, seq=seq, rng=np.random.default_rng(None if seed is None else [seed, k])
            )
            self._held[seq] = list(prompt)
            job.branches.append(run)
            self._advance(run, job.first_logits)

    def _advance(self, run: BranchRun, logits: Logits) -> None:
        """(under the lock) Draw `run`'s next token and decide whether it goes on."""
        token = sampler.draw(logits, run.spec.sampling, run.rng, run.drawn)
        run.logprobs.append(sampler.logprob(logits, token))
        if self._decoder.is_end(token):
            run.text += run.decoder.decode(b"", final=True)
            run.ends.append(len(run.text))
            run.pending = None
            run.finish = Finish.STOP
            return
        run.tokens.append(token)
        run.drawn[token] += 1
        run.text += run.decoder.decode(self._decoder.piece(token))
        run.ends.append(len(run.text))
        for stop in run.spec.sampling.stop:
            at = run.text.find(stop, max(0, run.emitted - len(stop)))
            if at >= 0:
                run.text = run.text[:at]
                run.ends = [e for e in run.ends if e < at] + [at]
                run.pending = None
                run.finish = Finish.STOP
                return
        run.pending = token
        if len(run.tokens) >= run.spec.max_tokens:
            run.finish = Finish.LENGTH
            run.pending = None
        elif run.spec.pause_at is not None and len(run.tokens) == run.spec.pause_at:
            run.finish = Finish.PAUSED
