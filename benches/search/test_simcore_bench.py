"""simcore against its baselines, same data, same run (pytest-benchmark).

    ./scripts/bench.sh            # all sizes, then benches/search/report_simcore.py
    .venv/bin/python -m pytest benches/search/test_simcore_bench.py -k "10000"   # a subset

Engines: simcore exact f32, simcore int8 scan + exact rescoring, numpy
(`X @ q` + argpartition, numpy's default BLAS threads), faiss-cpu IndexFlatIP,
and a SIMD memory-read baseline over the same f32 bytes on 1 and 2 threads.
Sizes N in {10k, 100k, 1M} x d in {384, 768}; k = 10; one query and a batch of 64.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt
import pytest

from flask_app import simcore

K = 10
BATCH = 64
SIZES = [(n, d) for n in (10_000, 100_000, 1_000_000) for d in (384, 768)]
ENGINES = ["simcore-f32", "simcore-int8", "numpy", "faiss"]
F32 = npt.NDArray[np.float32]


@dataclass
class Dataset:
    n: int
    d: int
    rows: F32
    queries: F32
    index: simcore.Index
    faiss_index: Any


_current: list[Dataset] = []


def dataset(n: int, d: int) -> Dataset:
    """One dataset in memory at a time (1M x 768 needs ~10 GB for all engines)."""
    if _current and (_current[0].n, _current[0].d) == (n, d):
        return _current[0]
    _current.clear()
    rng = np.random.default_rng(n + d)
    rows = rng.standard_normal((n, d), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    queries = rng.standard_normal((BATCH, d), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    index = simcore.Index(d)
    step = 100_000
    for start in range(0, n, step):
        stop = min(n, start + step)
        index.upsert([str(i) for i in range(start, stop)], rows[start:stop])
    flat = faiss.IndexFlatIP(d)
    flat.add(rows)
    _current.append(Dataset(n, d, rows, queries, index, flat))
    return _current[0]


def rounds_for(n: int, batch: int) -> int:
    work = n * batch
    if work <= 10_000:
        return 200
    if work <= 1_000_000:
        return 30
    if work <= 10_000_000:
        return 7
    return 3


def single(ds: Dataset, engine: str) -> Callable[[], object]:
    q = ds.queries[0]
    if engine == "simcore-f32":
        return lambda: ds.index.search(q, K)
    if engine == "simcore-int8":
        return lambda: ds.index.search(q, K, mode="int8")
    if engine == "numpy":
        return lambda: np.argpartition(-(ds.rows @ q), K)[:K]
    return lambda: ds.faiss_index.search(q[None, :], K)


def batch(ds: Dataset, engine: str) -> Callable[[], object]:
    qs = ds.queries
    if engine == "simcore-f32":
        return lambda: ds.index.search_batch(qs, K)
    if engine == "simcore-int8":
        return lambda: ds.index.search_batch(qs, K, mode="int8")
    if engine == "numpy":
        return lambda: np.argpartition(-(qs @ ds.rows.T), K, axis=1)[:, :K]
    return lambda: ds.faiss_index.search(qs, K)


def int8_recall(ds: Dataset) -> float:
    found = 0
    for q in ds.queries[:20]:
        exact = set(ds.index.search(q, K)[0])
        found += len(exact & set(ds.index.search(q, K, mode="int8")[0]))
    return found / (20 * K)


# Grouped by size so each dataset is built once; no read baseline per batch.
CASES = [
    (n, d, queries, engine)
    for n, d in SIZES
    for queries in (1, BATCH)
    for engine in ENGINES + (["read-1t", "read-2t"] if queries == 1 else [])
]


@pytest.mark.parametrize(
    ("n", "d", "queries", "engine"),
    CASES,
    ids=[f"{n}x{d}-{'single' if q == 1 else 'batch64'}-{e}" for n, d, q, e in CASES],
)
def test_search(benchmark: Any, engine: str, queries: int, n: int, d: int) -> None:
    ds = dataset(n, d)
    f32_bytes, i8_bytes = ds.index.scan_bytes
    benchmark.group = f"{n}x{d} {'single' if queries == 1 else 'batch64'}"
    benchmark.extra_info.update(
        engine=engine,
        n=n,
        d=d,
        queries=queries,
        f32_bytes=f32_bytes,
        i8_bytes=i8_bytes,
        cores=os.cpu_count(),
        simd=simcore.simd_level(),
    )
    if engine.startswith("read"):
        threads = 1 if engine == "read-1t" else 2
        fn: Callable[[], object] = lambda: ds.index.read_baseline(threads)  # noqa: E731
    elif queries == 1:
        fn = single(ds, engine)
    else:
        fn = batch(ds, engine)
    if engine == "simcore-int8" and queries == 1:
        benchmark.extra_info["recall_at_10"] = int8_recall(ds)
    benchmark.pedantic(fn, rounds=rounds_for(n, queries), iterations=1, warmup_rounds=1)
