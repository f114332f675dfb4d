"""Why `POST /search` costs more than its scan the larger the store: the same
request, on the same 1,000-row store, timed right after this thread reads
B bytes of memory — the bytes an exact f32 scan reads over N × 384 rows.

    .venv/bin/python benches/search/after_scan.py [--rows 0 700 2800 20000 200000 1000000] \
        [--calls 300] [--json out.json]

For each N, in its own block (a pause between blocks): `calls` times, read
N × 1,536 bytes (`np.add.reduce` over a float32 array of N × 384, allocated
and touched before the clock starts), then one in-process WSGI call of the
real route (no socket; its own scan ~0.03 ms). What the call costs beyond
the first block's is what the request path pays for running after a scan
that has pushed the server's own code and data out of the CPU's caches.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benches.search.http_search import percentiles
from benches.search.request_path import edgerag_app, fill, search_call

DIM = 384
PAUSE_S = 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--rows", type=int, nargs="+", default=[0, 700, 2_800, 20_000, 200_000, 1_000_000]
    )
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    query = rng.standard_normal(DIM, dtype=np.float32)
    body = orjson.dumps({"query": query, "top_k": 10}, option=orjson.OPT_SERIALIZE_NUMPY)
    report: dict[str, Any] = {"calls": args.calls, "dim": DIM, "rows": {}}
    with tempfile.TemporaryDirectory() as tmp:
        fill(Path(tmp), rng)
        call = search_call(edgerag_app(Path(tmp)), body)
        for _ in range(50):  # warm-up
            call()
        print(f"{'rows read before':>16} {'MB':>7} {'read ms':>8} {'call p50 ms':>12} {'p99':>7}")
        for n in args.rows:
            memory = np.ones(n * DIM, dtype=np.float32)
            time.sleep(PAUSE_S)
            reads, calls = [], []
            for _ in range(args.calls):
                t0 = time.perf_counter()
                np.add.reduce(memory)
                t1 = time.perf_counter()
                call()
                calls.append(time.perf_counter() - t1)
                reads.append(t1 - t0)
            call_ms = percentiles(calls)
            row = {
                "megabytes": round(memory.nbytes / 2**20, 1),
                "read_p50_ms": percentiles(reads)["p50_ms"],
                "call_p50_ms": call_ms["p50_ms"],
                "call_p99_ms": call_ms["p99_ms"],
            }
            report["rows"][str(n)] = row
            print(
                f"{n:16,} {row['megabytes']:7.1f} {row['read_p50_ms']:8.2f} "
                f"{row['call_p50_ms']:12.3f} {row['call_p99_ms']:7.3f}",
                flush=True,
            )
            del memory
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
