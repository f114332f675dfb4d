"""Model replicas: one chat model per cluster node, each a Ray actor with
its own batch engine. A request runs on the least busy replica as a Ray
generator task streaming the job's progress (admitted, the prompt's reading,
each branch's new text and, once it stops, its hidden states); the server
mirrors it as an `engine.Job`, so the answer path reads a remote job as it
reads a local one. What the server asks of a running job (more branches,
keep one, stop) goes to the replica as a control call."""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.exceptions

from flask_app.cluster import actor_call
from flask_app.cluster.store import ClusterUnusable, detached_on, node_cpus, node_numbers
from flask_app.inference.embed import Embedder, LlamaEmbedder, Vectors, check_lengths
from flask_app.inference.engine import BatchEngine, Branch, BranchRun, Finish, Job, Request
from flask_app.inference.errors import ReplicaLost
from flask_app.inference.llama_backend import LlamaBackend
from flask_app.inference.llm import ChatMessage

_log = logging.getLogger("edgerag.cluster")

# How often a replica reports a running job's progress (seconds, at most).
_REPORT_S = 0.05


def _report(run: BranchRun, sent: dict[str, int]) -> dict[str, Any]:
    """What changed in `run` since `sent` (counts already reported)."""
    out: dict[str, Any] = {
        "tokens": run.tokens[sent["tokens"] :],
        "logprobs": run.logprobs[sent["logprobs"] :],
        "text": run.text[sent["text"] :] if len(run.text) >= sent["text"] else None,
        "whole_text": run.text if len(run.text) < sent["text"] else None,
        "ends": list(run.ends),
        "finish": None if run.finish is None else run.finish.value,
    }
    if run.finish is not None:  # the states the verifier reads, once it stopped
        out["last_state"] = run.last_state
        out["state_sum"] = run.state_sum
        out["fed"] = run.fed
        out["snapshots"] = run.snapshots
    sent.update(tokens=len(run.tokens), logprobs=len(run.logprobs), text=len(run.text))
    return out


class Replica:
    """A chat model with its engine, and the embedder when given, on one node
    (a threaded Ray actor: its jobs, their control calls and embeddings run
    side by side)."""

    def __init__(
        self,
        path: str,
        n_ctx: int,
        n_threads: int,
        model_id: str | None,
        embed_path: str | None = None,
        n_seq: int = 8,
    ) -> None:
        self.backend = LlamaBackend(
            Path(path), n_ctx=n_ctx, n_seq=n_seq, n_threads=n_threads, model_id=model_id
        )
        assert self.backend.engine is not None
        self.engine: BatchEngine = self.backend.engine
        self.jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self.embedder = LlamaEmbedder(Path(embed_path), n_threads=n_threads) if embed_path else None

    def embed(self, texts: Sequence[str]) -> Any:
        if self.embedder is None:
            raise RuntimeError("this replica has no embedder")
        return self.embedder.embed(texts)

    def pid(self) -> int:
        import os

        return os.getpid()

    def sequences(self) -> int:
        return self.engine.n_seq

    def run(self, job_id: str, request: Request) -> Iterator[tuple[str, Any]]:
        """The job's progress: ("admitted", None), ("prefilled", (first
        step, prompt states)), then ("branches", [report per branch]) as it
        writes, ("closed", None) at its end; stops at its next step once
        cancelled."""
        job = self.engine.submit(request)
        with self._lock:
            self.jobs[job_id] = job
        context = ray.get_runtime_context()
        sent: list[dict[str, int]] = []
        told_admitted = told_prefilled = False
        try:
            while True:
                if context.is_canceled():
                    return
                with job.cond:
                    job.cond.wait(_REPORT_S)
                    if job.error is not None:
                        raise job.error
                    if job.admitted and not told_admitted:
                        told_admitted = True
                        yield ("admitted", None)
                    if job.first is not None and not told_prefilled:
                        told_prefilled = True
                        yield ("prefilled", (job.first, job.prompt_state))
                    while len(sent) < len(job.branches):
                        sent.append({"tokens": 0, "logprobs": 0, "text": 0})
                    reports = [_report(r, sent[i]) for i, r in enumerate(job.branches)]
                    ended = job.closed or (
                        bool(job.branches)
                        and all(r.finish not in (None, Finish.PAUSED) for r in job.branches)
                    )
                if reports:
                    yield ("branches", reports)
                if ended:
                    yield ("closed", None)
                    return
        finally:
            job.close()
            with self._lock:
                self.jobs.pop(job_id, None)

    def control(self, job_id: str, op: str, arg: Any = None) -> None:
        with self._lock:
            job = self.jobs.get(job_id)
        if job is None:
            return
        if op == "spawn":
            job.spawn(arg)
        elif op == "keep_only":
            job.keep_only(arg)
        elif op == "close":
            job.close()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "model"


class RemoteJob(Job):
    """A job running on a replica, mirrored here from its reports; what is
    asked of it goes to the replica too."""

    def __init__(self, engine: RemoteEngine, request: Request, job_id: str) -> None:
        super().__init__(engine, request)
        self.job_id = job_id
        self.replica: Any = None

    def _tell(self, op: str, arg: Any = None) -> None:
        if self.replica is not None:
            actor_call.call(self.replica, Replica.control, self.job_id, op, arg)

    def spawn(self, branches: Sequence[Branch]) -> None:
        with self.cond:
            self.spawning += branches  # mirrored until the replica reports them
        self._tell("spawn", list(branches))

    def keep_only(self, index: int) -> None:
        super().keep_only(index)
        self._tell("keep_only", index)

    def close(self) -> None:
        super().close()
        self._tell("close")

    def mirror(self, kind: str, value: Any) -> None:
        """(under the lock) One report from the replica."""
        if kind == "admitted":
            self.admitted = True
        elif kind == "prefilled":
            self.first, self.prompt_state = value
            self.read = len(self.request.prompt)
            self.prefilled_at = time.monotonic()
        elif kind == "branches":
            specs = [*self.request.branches, *self.spawning]
            while len(self.branches) < len(value):
                k = len(self.branches)
                self.branches.append(BranchRun(spec=specs[k], seq=-1, rng=np.random.default_rng()))
            if len(self.branches) >= len(self.request.branches) + len(self.spawning):
                self.spawning = []
            for run, report in zip(self.branches, value, strict=True):
                if run.finish is Finish.CLOSED:
                    continue
                run.tokens += report["tokens"]
                run.logprobs += report["logprobs"]
                run.text = (
                    report["whole_text"]
                    if report["whole_text"] is not None
                    else run.text + report["text"]
                )
                run.ends = report["ends"]
                finish = report["finish"]
                run.finish = None if finish is None else Finish(finish)
                if "last_state" in report:
                    run.last_state = report["last_state"]
                    run.state_sum = report["state_sum"]
                    run.fed = report["fed"]
                    run.snapshots = report["snapshots"]
        elif kind == "closed":
            for run in self.branches:
                run.finish = run.finish or Finish.CLOSED
            self.closed = True
        self.cond.notify_all()


class RemoteEngine:
    """The engine a server on a cluster hands requests to: each runs on the
    least busy replica, which admits it when its sequences are free."""

    def __init__(self, replicas: list[Any], n_seq: int) -> None:
        self.replicas = replicas
        self.n_seq = n_seq * len(replicas)
        self.cond = threading.Condition()
        self._jobs: list[RemoteJob] = []
        self._in_flight = [0] * len(replicas)  # sequences asked of each replica
        self._ids = itertools.count()
        self.steps = 0
        self.prompt_tokens_read = 0

    @property
    def waiting(self) -> int:
        with self.cond:
            return sum(not job.admitted and not job.closed for job in self._jobs)

    @property
    def busy_seqs(self) -> int:
        with self.cond:
            return sum(job.request.seqs for job in self._jobs if not job.closed)

    @property
    def active(self) -> int:
        with self.cond:
            return sum(job.admitted and not job.closed for job in self._jobs)

    def release(self, job: Job) -> None:
        """(under the lock) Nothing to free here: the replica frees its own."""

    def submit(self, request: Request) -> Job:
        job = RemoteJob(self, request, f"{id(self)}-{next(self._ids)}")
        with self.cond:
            self._jobs.append(job)
        threading.Thread(target=self._follow, args=(job,), daemon=True).start()
        return job

    def _take(self, avoid: set[int], seqs: int) -> int:
        with self.cond:
            free = [i for i in range(len(self.replicas)) if i not in avoid]
            n = min(free, key=lambda i: self._in_flight[i])
            self._in_flight[n] += seqs
            return n

    def _follow(self, job: RemoteJob) -> None:
        """Run `job` on a replica and mirror its reports; a replica that
        fails before the prompt was read is left for the next (each tried
        once); one lost later ends the job with `ReplicaLost` (503, retry)."""
        failed: set[int] = set()
        try:
            while not job.closed:
                n = self._take(failed, job.request.seqs)
                job.replica = self.replicas[n]
                stream = None
                try:
                    stream = actor_call.stream(job.replica, Replica.run, job.job_id, job.request)
                    for ref in stream:
                        kind, value = ray.get(ref)
                        with job.cond:
                            job.mirror(kind, value)
                        if job.closed:
                            break
                    return
                except ray.exceptions.RayError as exc:
                    _log.warning("model replica %d failed: %s", n, type(exc).__name__)
                    failed.add(n)
                    if job.prefilled or len(failed) == len(self.replicas):
                        with job.cond:
                            job.error = ReplicaLost(f"replica {n}: {type(exc).__name__}")
                            job.closed = True
                            job.cond.notify_all()
                        return
                except Exception as exc:
                    with job.cond:
                        job.error = exc
                        job.closed = True
                        job.cond.notify_all()
                    return
                finally:
                    if stream is not None and job.closed:
                        ray.cancel(stream)  # the client left: the replica stops at its next step
                    with self.cond:
                        self._in_flight[n] -= job.request.seqs
        finally:
            with self.cond:
                self._jobs.remove(job)

    def stop(self) -> None:
        """The replicas outlive this server (detached actors)."""


class ReplicaBackend:
    """The `Backend` a server on a cluster uses: counts and renders with the
    model's tokenizer alone (no weights in the server), generates on the
    replicas."""

    def __init__(self, local: LlamaBackend, replicas: list[Any], n_seq: int) -> None:
        self.local = local
        self.replicas = replicas
        self.replica_count = len(replicas)
        self.engine: Any = RemoteEngine(replicas, n_seq)

    @classmethod
    def start(
        cls,
        path: Path,
        *,
        n_ctx: int,
        n_threads: int,
        model_id: str | None,
        count: int | None,
        embed_path: Path | None = None,
        n_seq: int = 8,
    ) -> ReplicaBackend:
        """Reach (or start) `count` replicas of the model at `path` (None: one per
        edgerag node), each with at most `n_threads` threads and its share of
        its node's Ray CPUs; the file must be at that path on every node."""
        local = LlamaBackend(path, n_ctx=n_ctx, model_id=model_id, vocab_only=True)
        nodes = node_numbers()
        if not nodes:
            raise ClusterUnusable("no node of this Ray cluster offers edgerag replicas")
        remote = ray.remote(Replica)
        count = count or len(nodes)
        placed = [nodes[i % len(nodes)] for i in range(count)]
        cpus = node_cpus()
        replicas: list[Any] = []
        for i, node in enumerate(placed):
            # the node's CPUs shared by its replicas: more llama.cpp threads than
            # cores make every thread wait for a descheduled one at each step
            threads = max(1, min(n_threads, int(cpus.get(node, 1) // placed.count(node))))
            options = detached_on(
                node,
                f"llm-{_slug(local.model_id)}-{i}",
                max_task_retries=0,  # a half-streamed answer is not replayed
                num_cpus=threads,
                max_concurrency=4 * n_seq + 4,  # jobs, their control calls, embeddings
            )
            embeds = str(embed_path) if embed_path is not None else None
            replicas.append(
                remote.options(**options).remote(str(path), n_ctx, threads, model_id, embeds, n_seq)
            )
        ray.get([actor_call.call(r, Replica.pid) for r in replicas], timeout=300)  # loaded
        _log.info("%d replicas of %s", len(replicas), local.model_id)
        return cls(local, replicas, n_seq)

    @property
    def model_id(self) -> str:
        return self.local.model_id

    @property
    def n_ctx(self) -> int:
        return self.local.n_ctx

    def tokens(self, text: str) -> list[int]:
        return self.local.tokens(text)

    def count_tokens(self, text: str) -> int:
        return self.local.count_tokens(text)

    def first_tokens(self, words: Sequence[str]) -> tuple[int, ...]:
        return self.local.first_tokens(words)

    def render(self, messages: Sequence[ChatMessage]) -> str:
        return self.local.render(messages)


# Batches smaller than this are embedded in the server itself (a question, a
# short upload): a round trip to a replica would cost more than it saves.
SPREAD_MIN_TEXTS = 32


class SpreadEmbedder:
    """The server's embedder, with large batches split over the replicas'
    embedders (ingestion); small ones and anything a replica fails are
    embedded here."""

    def __init__(self, local: Embedder, replicas: list[Any]) -> None:
        self.local = local
        self.replicas = replicas

    @property
    def model_id(self) -> str:
        return self.local.model_id

    @property
    def dim(self) -> int:
        return self.local.dim

    @property
    def max_tokens(self) -> int:
        return self.local.max_tokens

    def count_tokens(self, text: str) -> int:
        return self.local.count_tokens(text)

    def tokens(self, text: str) -> list[str]:
        return self.local.tokens(text)

    def embed(self, texts: Sequence[str], ids: Sequence[str] | None = None) -> Vectors:
        if len(texts) < SPREAD_MIN_TEXTS or not self.replicas:
            return self.local.embed(texts, ids)
        check_lengths(self.local, texts, ids)  # the whole batch fails here, as one
        count = len(self.replicas)
        size = -(-len(texts) // count)
        parts = [list(texts[i : i + size]) for i in range(0, len(texts), size)]
        refs = [
            actor_call.call(r, Replica.embed, part)
            for r, part in zip(self.replicas, parts, strict=False)
        ]
        try:
            done: list[Vectors] = ray.get(refs, timeout=600)
        except ray.exceptions.RayError as exc:
            _log.warning("embedding on the replicas failed (%s): embedding here", exc)
            return self.local.embed(texts, ids)
        return np.vstack(done).astype(np.float32, copy=False)
