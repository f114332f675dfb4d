"""Sign-bit (binary) codes with exact rescoring against exact f32, int8 and
FAISS `IndexBinaryFlat`, on embeddings of real text, in one run.

    .venv/bin/python benches/search/binary_codes.py [--sizes 1000000] [--queries 200]
        [--oversample 10 20 40 100] [--json benches/results/binary_codes.json]

The vectors: MiniLM embeddings of 52,000 real paragraphs from documents on this
machine (`benches/search/real_passages.py`); 200 of them, spread over the sources,
are the queries and never indexed. To reach N rows the other 51,800 are
repeated, each copy with Gaussian noise (sigma 0.01 per dimension, about
cos 0.98 to its original) and normalised again, so near-duplicates compete
the way they do in a large real collection. Ground truth: exact f32 top-10.

Each way runs over the same persistent simcore index (as the server opens
it) on all cores; FAISS scans the same sign bits (`IndexBinaryFlat`, its
own threads) and its candidates are rescored exactly the same way, with
NumPy over the same f32 rows. Times are medians over the queries, taken in
turn query by query so the machine's drift hits every way alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benches.search.real_passages import vectors as real_vectors
from flask_app import simcore
from flask_app.inference.llama_runtime import available_cores

# FAISS's OpenMP threads spin while waiting by default, which slows every
# other way timed in turn with it on two cores
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
K = 10
NOISE = 0.01
PASSAGES = 52_000


def corpus(n: int, base: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`n` unit rows: `base` first, then noisy copies of it."""
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    take = min(n, len(base))
    out[:take] = base[:take]
    for lo in range(take, n, len(base)):
        hi = min(n, lo + len(base))
        rows = base[: hi - lo] + rng.normal(0, NOISE, (hi - lo, base.shape[1])).astype(np.float32)
        out[lo:hi] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def recall(found: list[list[int]], truth: list[list[int]]) -> float:
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth, strict=True))
    return hits / sum(len(t) for t in truth)


def run(n: int, base: np.ndarray, queries: np.ndarray, ratios: list[int]) -> dict[str, Any]:
    import faiss

    rng = np.random.default_rng(1)
    matrix = corpus(n, base, rng)
    threads = available_cores()
    faiss.omp_set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "index"
        index = simcore.Index.create(root, matrix.shape[1])
        for lo in range(0, n, 100_000):
            index.upsert(
                [str(i) for i in range(lo, min(n, lo + 100_000))], matrix[lo : lo + 100_000]
            )
        disk = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        del index
        index = simcore.Index.open(root)  # mapped from its files, as the server has it
        index.threads = threads
        started = time.perf_counter()
        index.build_binary()
        build_s = time.perf_counter() - started
        packed = np.packbits(matrix > 0, axis=1)
        flat = faiss.IndexBinaryFlat(matrix.shape[1])
        flat.add(packed)
        packed_q = np.packbits(queries > 0, axis=1)

        def faiss_way(r: int) -> Callable[[int], list[int]]:
            def one(i: int) -> list[int]:
                _, cand = flat.search(packed_q[i : i + 1], K * r)
                rows = cand[0][cand[0] >= 0]
                scores = matrix[rows] @ queries[i]
                best = np.argsort(-scores, kind="stable")[:K]
                return [int(rows[j]) for j in best]

            return one

        def simcore_way(mode: str, r: int = 1) -> Callable[[int], list[int]]:
            return lambda i: [
                int(x) for x in index.search(queries[i], K, mode=mode, oversample=r)[0]
            ]

        ways: dict[str, Callable[[int], list[int]]] = {"f32 exact": simcore_way("exact")}
        ways["int8 x4"] = simcore_way("int8", 4)
        for r in ratios:
            ways[f"binary x{r}"] = simcore_way("binary", r)
            ways[f"faiss binary x{r}"] = faiss_way(r)
        found: dict[str, list[list[int]]] = {name: [] for name in ways}
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        for i in range(len(queries)):
            for name, way in ways.items():
                t = time.perf_counter()
                found[name].append(way(i))
                seconds[name].append(time.perf_counter() - t)
        truth = found["f32 exact"]
        rows_out = {
            name: {
                "recall@10": round(recall(found[name], truth), 4),
                "p50_ms": round(statistics.median(seconds[name][3:]) * 1e3, 3),
            }
            for name in ways
        }
        resident = {"f32 exact": 4 * 384, "int8 x4": 384}
        per_vector = index.binary_bytes / n
        for name in rows_out:
            scanned = resident.get(name, per_vector if name.startswith("binary") else 48)
            rows_out[name]["scanned_bytes_per_vector"] = round(scanned, 1)
        return {
            "rows": n,
            "threads": threads,
            "popcount": simcore.popcount_kernel(),
            "build_binary_s": round(build_s, 2),
            "disk_bytes_per_vector": round(disk / n, 1),
            "binary_bytes_per_vector_in_memory": round(per_vector, 1),
            "ways": rows_out,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--oversample", type=int, nargs="+", default=[10, 20, 40, 100])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    texts, all_vectors = real_vectors(PASSAGES)
    step = len(texts) // args.queries
    is_query = np.zeros(len(texts), dtype=bool)
    is_query[::step][: args.queries] = True
    queries, base = all_vectors[is_query], all_vectors[~is_query]
    print(f"{len(base):,} real passages indexed, {len(queries)} held out as queries", flush=True)
    report: dict[str, Any] = {"k": K, "noise_sigma": NOISE, "real_rows": len(base), "sizes": []}
    for n in args.sizes:
        result = run(n, base, queries, args.oversample)
        report["sizes"].append(result)
        print(
            f"{n:,} x 384: disk {result['disk_bytes_per_vector']} B/vector, sign bits in memory "
            f"{result['binary_bytes_per_vector_in_memory']} B/vector (built in "
            f"{result['build_binary_s']} s), popcount {result['popcount']}"
        )
        print(f"  {'way':20} {'recall@10':>9} {'p50 ms':>8} {'scanned B/vec':>13}")
        for name, row in result["ways"].items():
            print(
                f"  {name:20} {row['recall@10']:9.3f} {row['p50_ms']:8.2f} "
                f"{row['scanned_bytes_per_vector']:13.1f}"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
