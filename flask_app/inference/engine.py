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
sequences it reserves are free; where its prompt starts reading (what the
cache already holds of it) is `sequences.Sequences`'s to say. Hidden states
are read where they are computed anyway: at the prompt's last token, and at
each branch's newest token.

Every call into the model happens on the driver thread; callers only mark
what they want (`close`, `keep_only`, `spawn`) and wait on the lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flask_app.inference import sampler
from flask_app.inference.job import (
    Branch,
    BranchRun,
    ContextFull,
    Decoder,
    Engine,
    EngineError,
    Entry,
    Finish,
    Job,
    Request,
    State,
)
from flask_app.inference.sampler import Logits
from flask_app.inference.sequences import Sequences

__all__ = [
    "BatchEngine",
    "Branch",
    "BranchRun",
    "ContextFull",
    "Decoder",
    "Engine",
    "EngineError",
    "Entry",
    "Finish",
    "Job",
    "Request",
    "State",
]


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


def _reading(job: Job) -> bool:
    return not job.closed and job.read < len(job.request.prompt)


def _decoding(run: BranchRun) -> bool:
    return run.finish is None and run.pending is not None


def plan(jobs: Sequence[Job], n_batch: int, prompt_chunk: int) -> _Plan:
    """The next batch: each decoding branch's pending token, then a chunk of
    the oldest prompt still being read (the whole batch while none decodes)."""
    entries: list[Entry] = []
    owners: list[_Owner | None] = []
    layers: set[int] = set()
    for job in jobs:
        for run in job.branches:
            if _decoding(run):
                assert run.pending is not None
                entries.append((run.pending, len(job.request.prompt) + run.fed, run.seq, True))
                owners.append(_Owner(job, run))
                layers.update(job.request.layers)
    reading = next((job for job in jobs if _reading(job)), None)
    if reading is None:
        return _Plan(entries, owners, tuple(sorted(layers)))
    room = n_batch - len(entries)
    chunk = min(room, prompt_chunk) if entries else room
    if reading.read < reading.request.stable:
        chunk = min(chunk, reading.request.stable - reading.read)
    prompt = reading.request.prompt
    part = prompt[reading.read : reading.read + chunk]
    for i, token in enumerate(part):
        last = reading.read + i == len(prompt) - 1
        entries.append((token, reading.read + i, reading.seqs[0], last))
        owners.append(_Owner(reading, None) if last else None)
        if last:
            layers.update(reading.request.layers)
    return _Plan(entries, owners, tuple(sorted(layers)), reading, len(part))


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
        self.sequences = Sequences(decoder, n_seq)
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
            return self.n_seq - len(self.sequences.free)

    @property
    def active(self) -> int:
        with self.cond:
            return len(self._jobs)

    @property
    def decoder(self) -> Decoder:
        """What it decodes with (a benchmark drives it once the engine stopped)."""
        return self._decoder

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
                    if isinstance(failure, ContextFull) and self.sequences.forget_free():
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

    def _has_work(self) -> bool:
        if self._queue and len(self.sequences.free) >= self._queue[0].request.seqs:
            return True
        return any(
            job.spawning or _reading(job) or any(_decoding(r) for r in job.branches)
            for job in self._jobs
            if not job.closed
        )

    def release(self, job: Job) -> None:
        """(under the lock) Free the sequences of `job`'s dropped branches,
        and all of them once it is closed (bookkeeping only: no model call,
        so any thread may do it)."""
        for run in job.branches:
            if (job.closed or run.finish is Finish.CLOSED) and run.seq >= 0:
                self.sequences.give_back(run.seq)
                # given back: another request may hold it from now on
                job.seqs = [-1 if s == run.seq else s for s in job.seqs]
                run.seq = -1
        if job.closed and job in self._jobs:
            for seq in job.seqs:  # the prompt's, before it forked; spares
                if seq >= 0:
                    self.sequences.give_back(seq)
            job.seqs = [-1] * len(job.seqs)
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
        while self._queue and len(self.sequences.free) >= self._queue[0].request.seqs:
            self._admit(self._queue.popleft())

    def _admit(self, job: Job) -> None:
        """(under the lock) Give `job` its sequences and where its prompt
        starts reading (as on a fresh start when nothing else is admitted)."""
        request = job.request
        idle = not self._jobs and request.fresh
        job.seqs, job.read = self.sequences.take(request.prompt, request.stable, request.seqs, idle)
        job.admitted = True
        self._jobs.append(job)
        self.cond.notify_all()

    def _plan(self) -> _Plan:
        """(under the lock) The next batch."""
        return plan(self._jobs, self._n_batch, self.prompt_chunk)

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
                    held = reading.request.prompt[: reading.read]
                    self.sequences.read(reading.seqs[0], held, len(plan.entries))
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
                    held = [*owner.job.request.prompt, *run.tokens[: run.fed]]
                    self.sequences.held[run.seq] = held
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
                self.sequences.fork(job.seqs[0], seq, prompt)
            seed = spec.sampling.seed
            run = BranchRun(
                spec=spec, seq=seq, rng=np.random.default_rng(None if seed is None else [seed, k])
            )
            job.branches.append(run)
            self._advance(run, job.first_logits)

    def _advance(self, run: BranchRun, logits: Logits) -> None:
        """(under the lock) Draw `run`'s next token and decide whether it goes on."""
        token = sampler.draw(logits, run.spec.sampling, run.rng, run.drawn)
        end = self._decoder.is_end(token)
        run.take(
            token, sampler.logprob(logits, token), b"" if end else self._decoder.piece(token), end
        )
