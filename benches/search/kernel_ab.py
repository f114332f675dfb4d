"""Scan times of two simcore builds in the same run, alternating, so a change to
the kernels or their dispatch can be shown not to slow the host down.

    .venv/bin/python benches/search/kernel_ab.py BEFORE.so AFTER.so [--rows 200000] [--rounds 5]

Each round runs each build in its own process (the extension's module name is
fixed, so two builds cannot share one interpreter) over the same seeded rows
and queries; the table gives each build's median per mode and after/before.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODES = ("exact", "int8", "binary")


def load(path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("simcore", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(path: Path, rows: int, dim: int, queries: int) -> dict[str, float]:
    """Median seconds per query of each mode for the build at `path`."""
    import numpy as np

    simcore = load(path)
    rng = np.random.default_rng(7)
    index = simcore.Index(dim)
    vectors = rng.standard_normal((rows, dim), dtype=np.float32)
    index.upsert([f"r{i}" for i in range(rows)], vectors)
    index.build_binary()
    asked = rng.standard_normal((queries, dim), dtype=np.float32)
    out = {"level": simcore.simd_level()}
    for mode in MODES:
        index.search(asked[0], 10, mode=mode)  # warm the codes and caches
        times = []
        for query in asked:
            started = time.perf_counter()
            index.search(query, 10, mode=mode)
            times.append(time.perf_counter() - started)
        out[mode] = statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.rows, args.dim, args.queries)))
        return
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for round_no in range(args.rounds):
        for name in ("before", "after"):
            child = [sys.executable, __file__, "x", "x", "--child", str(getattr(args, name))]
            child += ["--rows", str(args.rows), "--dim", str(args.dim)]
            child += ["--queries", str(args.queries)]
            done = subprocess.run(child, check=True, capture_output=True, text=True, timeout=600)
            runs[name].append(json.loads(done.stdout))
        print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr)
    level = {name: runs[name][0]["level"] for name in runs}
    print(
        f"{args.rows} x {args.dim}, {args.rounds} rounds x {args.queries} queries; "
        f"levels: before {level['before']}, after {level['after']}"
    )
    print("| mode | before ms | after ms | after / before |")
    print("|---|---|---|---|")
    for mode in MODES:
        before = statistics.median(r[mode] for r in runs["before"]) * 1000
        after = statistics.median(r[mode] for r in runs["after"]) * 1000
        print(f"| {mode} | {before:.2f} | {after:.2f} | {after / before:.2f} |")


if __name__ == "__main__":
    main()
