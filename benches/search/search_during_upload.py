"""How long a search waits while the same collection takes an upload:
top-10 exact searches over a collection of --rows × --dim vectors, first on
a quiet collection, then while another thread upserts --batches batches of
--batch new rows (each fsync'd, as served), in-process.

    .venv/bin/python benches/search/search_during_upload.py [--rows 100000] [--dim 384]
        [--batch 20000] [--batches 8] [--json benches/results/search_during_upload.json]

An upsert holds the collection's write lock only while its batch is
published and its rows commit (docs/storage.md); before that change a
search that arrived meanwhile waited for the rest of the batch's write
(benches/results/search_during_upload{,_1000}.json against `…_staged.json`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from flask_app.store import Collection


def percentiles(seconds: list[float]) -> dict[str, Any]:
    ms = sorted(s * 1e3 for s in seconds)
    return {
        "searches": len(ms),
        "p50_ms": round(ms[len(ms) // 2], 1),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
        "max_ms": round(ms[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        collection = Collection(Path(tmp) / "c")
        ids = [f"s{i}" for i in range(args.rows)]
        vectors = rng.standard_normal((args.rows, args.dim), dtype=np.float32)
        collection.upsert(
            ids, vectors, [""] * args.rows, [None] * args.rows, mode="vector", embedding_model=None
        )
        batches = [
            (
                rng.standard_normal((args.batch, args.dim), dtype=np.float32),
                [f"b{b}-{i}" for i in range(args.batch)],
            )
            for b in range(args.batches)
        ]
        query = rng.standard_normal(args.dim, dtype=np.float32)
        quiet = []
        for _ in range(50):
            t = time.perf_counter()
            collection.search(query, 10)
            quiet.append(time.perf_counter() - t)
        done = threading.Event()
        writes: list[float] = []

        def write() -> None:
            for rows, batch_ids in batches:
                t = time.perf_counter()
                collection.upsert(
                    batch_ids,
                    rows,
                    [""] * len(batch_ids),
                    [None] * len(batch_ids),
                    mode="vector",
                    embedding_model=None,
                )
                writes.append(time.perf_counter() - t)
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        busy = []
        deadline = time.monotonic() + 600
        while not done.is_set() and time.monotonic() < deadline:
            t = time.perf_counter()
            collection.search(query, 10)
            busy.append(time.perf_counter() - t)
        writer.join(600)
        collection.close()
    results = {
        "rows": args.rows,
        "dim": args.dim,
        "batch": args.batch,
        "quiet": percentiles(quiet),
        "during_uploads": percentiles(busy),
        "write_ms_median": round(sorted(writes)[len(writes) // 2] * 1e3, 1),
    }
    for name in ("quiet", "during_uploads"):
        r = results[name]
        print(
            f"{name}: {r['searches']} searches, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, "
            f"max {r['max_ms']} ms"
        )
    print(f"one batch's write: median {results['write_ms_median']} ms")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
