"""`simcore.top_k` on a NumPy array against `Index.search` on the same rows
(and numpy), in one run: a C-contiguous float32 array is scanned in place
(no copy), split across the cores like the index's scan.

    .venv/bin/python benches/search/topk_array.py [--n 1000000] [--dim 384] [--repeats 7]

Results: benches/results/topk_array.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from flask_app import simcore


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((args.n, args.dim), dtype=np.float32)
    query = rng.standard_normal(args.dim, dtype=np.float32)
    index = simcore.Index(args.dim)
    for lo in range(0, args.n, 100_000):
        hi = min(args.n, lo + 100_000)
        index.upsert([str(i) for i in range(lo, hi)], rows[lo:hi])
    ids, _ = index.search(query, 10)
    rows_found, _ = simcore.top_k(rows, query, 10)
    assert [int(i) for i in ids] == rows_found.tolist()  # the same answer
    fortran = np.asfortranarray(rows[: min(args.n, 200_000)])

    def numpy_top10() -> object:
        scores = rows @ query
        return np.argpartition(scores, -10)[-10:]

    result = {
        "n": args.n,
        "dim": args.dim,
        "top_k_array_ms": median_ms(lambda: simcore.top_k(rows, query, 10), args.repeats),
        "index_search_ms": median_ms(lambda: index.search(query, 10), args.repeats),
        "numpy_ms": median_ms(numpy_top10, args.repeats),
        "top_k_fortran_order_200k_ms": median_ms(
            lambda: simcore.top_k(fortran, query, 10), args.repeats
        ),
    }
    result["ratio_top_k_to_index_search"] = round(
        result["top_k_array_ms"] / result["index_search_ms"], 3
    )
    print(json.dumps(result, indent=2))
    out = Path("benches/results/topk_array.json")
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
