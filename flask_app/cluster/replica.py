"""Model replicas: one chat model per cluster node, each a Ray actor
generating one answer at a time; the server keeps one queue in front of them
(`FifoGate` with one place per replica) and streams each answer from the
replica it was given through a Ray generator task."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.exceptions

from flask_app.cluster import actor_call
from flask_app.cluster.store import ClusterUnusable, detached_on, node_cpus, node_numbers
from flask_app.inference.embed import Embedder, LlamaEmbedder, Vectors, check_lengths
from flask_app.inference.llm import (
    ChatMessage,
    FirstTokenProbe,
    HiddenStateProbe,
    JudgeProbe,
    LlamaBackend,
    ReplicaLost,
    Sampling,
)

_log = logging.getLogger("edgerag.cluster")


class Replica:
    """A chat model, and the embedder when given, on one node (run as a Ray
    actor with two threads: one generates, one embeds)."""

    def __init__(
        self,
        path: str,
        n_ctx: int,
        n_threads: int,
        model_id: str | None,
        embed_path: str | None = None,
    ) -> None:
        self.backend = LlamaBackend(Path(path), n_ctx=n_ctx, n_threads=n_threads, model_id=model_id)
        self.generating = threading.Lock()  # llama.cpp serves one sequence at a time
        self.embedder = LlamaEmbedder(Path(embed_path), n_threads=n_threads) if embed_path else None

    def embed(self, texts: Sequence[str]) -> Any:
        if self.embedder is None:
            raise RuntimeError("this replica has no embedder")
        return self.embedder.embed(texts)

    def pid(self) -> int:
        import os

        return os.getpid()

    def generate(
        self,
        prompt: str,
        max_tokens: int,
        sampling: Sampling,
        probe_starts: Sequence[str] | None,
        judge_messages: Sequence[ChatMessage] | None,
        hidden_layers: Sequence[int] | None = None,
    ) -> Iterator[tuple[str, Any]]:
        """("judge", P(yes)), ("probe", probability) and ("hidden", states by
        layer) when asked, before the first ("text", delta); stops at the next
        token once cancelled."""
        probe = FirstTokenProbe(probe_starts) if probe_starts is not None else None
        judge = JudgeProbe(judge_messages) if judge_messages is not None else None
        hidden = HiddenStateProbe(tuple(hidden_layers)) if hidden_layers else None
        tokens = self.backend.generate(
            prompt,
            max_tokens=max_tokens,
            sampling=sampling,
            probe=probe,
            judge=judge,
            hidden=hidden,
        )
        context = ray.get_runtime_context()
        told = False
        self.generating.acquire()  # two servers may route to the same replica
        try:
            for delta in tokens:
                if context.is_canceled():
                    return
                if not told:
                    told = True
                    if judge is not None:
                        yield ("judge", judge.probability)
                    if probe is not None:
                        yield ("probe", probe.probability)
                    if hidden is not None:
                        yield ("hidden", hidden.states)
                yield ("text", delta)
            if not told and judge is not None:
                yield ("judge", judge.probability)
        finally:
            close = getattr(tokens, "close", None)
            if close is not None:
                close()
            self.generating.release()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "model"


class ReplicaBackend:
    """The `Backend` a server on a cluster uses: counts and renders with the
    model's tokenizer alone (no weights in the server), generates on the
    least busy replica."""

    def __init__(self, local: LlamaBackend, replicas: list[Any]) -> None:
        self.local = local
        self.replicas = replicas
        self._lock = threading.Lock()
        self._in_flight = [0] * len(replicas)

    @classmethod
    def start(
        cls,
        path: Path,
        *,
        n_ctx: int,
        n_threads: int,
        model_id: str | None,
        count: int,
        embed_path: Path | None = None,
    ) -> ReplicaBackend:
        """Reach (or start) `count` replicas of the model at `path` (0: one per
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
                max_concurrency=2,  # a generation and an embedding batch
            )
            embeds = str(embed_path) if embed_path is not None else None
            replicas.append(
                remote.options(**options).remote(str(path), n_ctx, threads, model_id, embeds)
            )
        ray.get([actor_call.call(r, Replica.pid) for r in replicas], timeout=300)  # loaded
        _log.info("%d replicas of %s", len(replicas), local.model_id)
        return cls(local, replicas)

    @property
    def model_id(self) -> str:
        return self.local.model_id

    @property
    def n_ctx(self) -> int:
        return self.local.n_ctx

    def count_tokens(self, text: str) -> int:
        return self.local.count_tokens(text)

    def render(self, messages: Sequence[ChatMessage]) -> str:
        return self.local.render(messages)

    def _take(self, avoid: set[int]) -> int:
        with self._lock:
            free = [i for i in range(len(self.replicas)) if i not in avoid]
            n = min(free, key=lambda i: self._in_flight[i])
            self._in_flight[n] += 1
            return n

    def _give_back(self, n: int) -> None:
        with self._lock:
            self._in_flight[n] -= 1

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int,
        sampling: Sampling,
        probe: FirstTokenProbe | None,
        judge: JudgeProbe | None = None,
        hidden: HiddenStateProbe | None = None,
    ) -> Iterator[str]:
        """Deltas from the least busy replica; one that fails before its first
        delta is left for the next (each tried once). A replica lost after it
        began answering ends the answer with `ReplicaLost` (503, retry)."""
        args = (
            prompt,
            max_tokens,
            sampling,
            list(probe.starts) if probe is not None else None,
            list(judge.messages) if judge is not None else None,
            list(hidden.layers) if hidden is not None else None,
        )
        failed: set[int] = set()
        while True:
            n = self._take(failed)
            started = False
            stream = None
            try:
                stream = actor_call.stream(self.replicas[n], Replica.generate, *args)
                for ref in stream:
                    kind, value = ray.get(ref)
                    started = True
                    if kind == "text":
                        yield value
                    elif kind == "probe" and probe is not None:
                        probe.probability = value
                    elif kind == "judge" and judge is not None:
                        judge.probability = value
                    elif kind == "hidden" and hidden is not None:
                        hidden.states = value
                stream = None  # finished: nothing to cancel
                return
            except ray.exceptions.RayError as exc:
                _log.warning("model replica %d failed: %s", n, type(exc).__name__)
                stream = None
                failed.add(n)
                if started or len(failed) == len(self.replicas):
                    raise ReplicaLost(f"replica {n}: {type(exc).__name__}") from exc
            finally:
                if stream is not None:
                    ray.cancel(stream)  # the client left: the replica stops at its next token
                self._give_back(n)


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
