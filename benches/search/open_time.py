"""Time to open a persistent simcore index (mmap + id table), and to reopen a
store collection, with N x d vectors on disk.

    .venv/bin/python benches/search/open_time.py [--n 1000000] [--dim 384]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from flask_app import simcore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index"
        index = simcore.Index.create(path, args.dim)
        start = time.perf_counter()
        step = 50_000
        for lo in range(0, args.n, step):
            hi = min(args.n, lo + step)
            block = rng.standard_normal((hi - lo, args.dim), dtype=np.float32)
            index.upsert([f"doc-{i}" for i in range(lo, hi)], block)
        print(f"wrote {args.n:,} x {args.dim} in {time.perf_counter() - start:.1f} s")
        del index
        times = []
        for _ in range(5):
            start = time.perf_counter()
            reopened = simcore.Index.open(path)
            times.append(time.perf_counter() - start)
            assert len(reopened) == args.n
            del reopened
        print(
            f"open: median {statistics.median(times):.3f} s (runs: "
            + ", ".join(f"{t:.3f}" for t in times)
            + ")"
        )


if __name__ == "__main__":
    main()
