"""Scale-out costs on this machine, each against its baseline in the same run.

    .venv/bin/python benches/serving/cluster.py [--n 1000000] [--dim 384] [--shards 1 2 4]
        [--queries 100] [--answers 8] [--chunks 2000] [--only search answers ingestion]
        [--json benches/results/cluster.json]

Search: the same unit vectors go into one process's store and into a
collection split over S shards of a 2-node local Ray cluster (both nodes on
this machine's 2 cores); the same queries (k 10) are timed on both, the
results checked identical, and "overhead" is the sharded median minus the
one-process median. Answers: the same RAG prompt answered `--answers` times
at once by the one-process model (2 threads), by 1 replica (2 threads) and by
2 replicas (1 thread each: equal total threads), greedy, 48 tokens.
Ingestion: evaluation-set passages embedded 32 at a time (the ingestion
worker's batch) by the server's embedder, then spread over 1 and 2 replicas.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import ray

from benches.quality import eval_sets
from flask_app.cluster.replica import ReplicaBackend, SpreadEmbedder
from flask_app.cluster.store import ClusterStore
from flask_app.inference.embed import LlamaEmbedder
from flask_app.inference.llama_backend import LlamaBackend
from flask_app.inference.llm import LLM, ChatMessage, Sampling
from flask_app.settings import Settings
from flask_app.store import Store
from tests.stores import local_cluster

K = 10
BATCH = 20_000
INGEST_BATCH = 32  # flask_app/ingest/worker.py
PROMPT: list[ChatMessage] = [
    {"role": "system", "content": "Answer from the documents only."},
    {
        "role": "user",
        "content": "Documents:\n[1] The office guest Wi-Fi network is called Calder-Guest.\n"
        "[2] The Calder City Museum is open Tuesday to Sunday from 10:00 to 18:00 and closed "
        "on Mondays.\n\nQuestion: When is the museum open, and what is the Wi-Fi called?",
    },
]


def unit_matrix(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    matrix = rng.standard_normal((n, dim), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


def fill(collection: Any, matrix: np.ndarray) -> float:
    started = time.perf_counter()
    for lo in range(0, len(matrix), BATCH):
        hi = min(len(matrix), lo + BATCH)
        ids = [f"doc-{i}" for i in range(lo, hi)]
        collection.upsert(
            ids, matrix[lo:hi], ids, [None] * len(ids), mode="vector", embedding_model=None
        )
    return time.perf_counter() - started


def timed_searches(collection: Any, queries: np.ndarray) -> tuple[float, list[list[str]]]:
    collection.search(queries[0], K)  # warm
    times, ids = [], []
    for q in queries:
        started = time.perf_counter()
        hits = collection.search(q, K)
        times.append(time.perf_counter() - started)
        ids.append([h.id for h in hits])
    return statistics.median(times) * 1000, ids


def search_costs(n: int, dim: int, shard_counts: list[int], queries: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    matrix = unit_matrix(n, dim, rng)
    qs = unit_matrix(queries, dim, rng)
    out: dict[str, Any] = {"n": n, "dim": dim, "queries": queries, "k": K}
    with tempfile.TemporaryDirectory() as tmp:
        one = Store(Path(tmp) / "one")
        single = one.collection("bench", "c")
        fill(single, matrix)
        base_ms, want = timed_searches(single, qs)
        out["one_process_ms"] = round(base_ms, 2)
        print(f"one process: {base_ms:.2f} ms median", flush=True)
        one.close()
        for shards in shard_counts:
            cluster = local_cluster(2, object_store_mb=400)
            try:
                store = ClusterStore.connect(
                    cluster.address, shards, Path(tmp) / f"front-{shards}", timeout=300
                )
                sharded = store.collection("bench", "c")
                fill_s = fill(sharded, matrix)
                ms, got = timed_searches(sharded, qs)
                assert got == want, f"{shards} shards: results differ from one process"
                out[f"shards_{shards}"] = {
                    "median_ms": round(ms, 2),
                    "overhead_ms": round(ms - base_ms, 2),
                    "ratio": round(ms / base_ms, 2),
                    "fill_vectors_per_s": round(n / fill_s),
                }
                print(f"{shards} shards: {ms:.2f} ms median ({ms - base_ms:+.2f} ms)", flush=True)
                store.close()
            finally:
                ray.shutdown()
                cluster.shutdown()
    return out


def throughput(llm: LLM, answers: int) -> float:
    llm.chat(PROMPT, max_tokens=48, sampling=Sampling(temperature=0.0))  # warm
    done: list[str] = []

    def ask() -> None:
        done.append(llm.chat(PROMPT, max_tokens=48, sampling=Sampling(temperature=0.0)))

    started = time.perf_counter()
    pool = [threading.Thread(target=ask) for _ in range(answers)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(600)
    assert len(done) == answers
    return answers / (time.perf_counter() - started)


@contextlib.contextmanager
def replicas_on_a_cluster(
    replicas: int, threads: int, embed_path: Path | None = None
) -> Iterator[ReplicaBackend]:
    """`replicas` model replicas of `threads` threads on a fresh 2-node local cluster."""
    settings = Settings.load({}, os.environ)
    cluster = local_cluster(2)
    try:
        ray.init(address=cluster.address, namespace="edgerag", log_to_driver=False)
        yield ReplicaBackend.start(
            settings.llm_path(),
            n_ctx=4096,
            n_threads=threads,
            model_id=None,
            count=replicas,
            embed_path=embed_path,
        )
    finally:
        ray.shutdown()
        cluster.shutdown()


def answer_rates(answers: int) -> dict[str, Any]:
    settings = Settings.load({}, os.environ)
    path = settings.llm_path()
    out: dict[str, Any] = {"answers": answers, "model": settings.llm}
    local = LLM(LlamaBackend(path, n_threads=2), max_waiters=answers)
    out["one_process_2_threads"] = round(throughput(local, answers), 3)
    del local
    for replicas, threads in ((1, 2), (2, 1)):
        with replicas_on_a_cluster(replicas, threads) as backend:
            llm = LLM(backend, max_waiters=answers)
            rate = throughput(llm, answers)
        out[f"replicas_{replicas}_x_{threads}_threads"] = round(rate, 3)
        print(f"{replicas} replica(s) × {threads} thread(s): {rate:.3f} answers/s", flush=True)
    return out


def ingestion_rates(count: int) -> dict[str, Any]:
    """Chunks/s embedding evaluation-set passages in batches of the ingestion
    worker's size: the server's own embedder, then spread over 1 and 2
    replicas (2 and 1 threads each)."""
    settings = Settings.load({}, os.environ)
    passages = [p["text"] for p in eval_sets.load("python-reference").passages()]
    texts = [passages[i % len(passages)] for i in range(count)]
    local = LlamaEmbedder(settings.embed_path(), n_threads=2)

    def rate(embedder: Any) -> float:
        embedder.embed(texts[:INGEST_BATCH])  # warm
        started = time.perf_counter()
        for lo in range(0, len(texts), INGEST_BATCH):
            embedder.embed(texts[lo : lo + INGEST_BATCH])
        return len(texts) / (time.perf_counter() - started)

    out: dict[str, Any] = {"chunks": count, "batch": INGEST_BATCH}
    out["one_process_2_threads"] = round(rate(local), 1)
    for replicas, threads in ((1, 2), (2, 1)):
        with replicas_on_a_cluster(replicas, threads, settings.embed_path()) as backend:
            chunks = rate(SpreadEmbedder(local, backend.replicas))
        out[f"replicas_{replicas}_x_{threads}_threads"] = round(chunks, 1)
        print(f"{replicas} replica(s) × {threads} thread(s): {chunks:.1f} chunks/s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--answers", type=int, default=8)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--chunks", type=int, default=2000, help="texts for the ingestion rate")
    parser.add_argument("--only", choices=("search", "answers", "ingestion"), nargs="+")
    args = parser.parse_args()
    parts = args.only or ["search", "answers", "ingestion"]
    report: dict[str, Any] = {}
    if "search" in parts:
        report["search"] = search_costs(args.n, args.dim, args.shards, args.queries)
    if "answers" in parts:
        report["answers"] = answer_rates(args.answers)
    if "ingestion" in parts:
        report["ingestion"] = ingestion_rates(args.chunks)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
