"""Search latency while a collection compacts: the delete that makes dead rows
reach the live ones compacts the index, and a reader thread searches the
whole time. Baseline in the same run: the same compaction holding the
collection's read/write lock throughout, as compaction used to.

    .venv/bin/python benches/search/compaction_search.py [--n 200000] [--dim 384] [--rounds 3]

Writes benches/results/compaction_search.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from flask_app.store import Store
from flask_app.store.collection import Collection


def fill_one_delete_short_of_compaction(
    collection: Collection, n: int, dim: int, seed: int
) -> list[str]:
    """n live rows and n - 1 dead ones: one delete short of a compaction."""
    rng = np.random.default_rng(seed)
    ids = [f"r{i}" for i in range(n)]
    for batch in (ids, ids[:-1]):
        for lo in range(0, len(batch), 20_000):
            part = batch[lo : lo + 20_000]
            vectors = rng.standard_normal((len(part), dim)).astype(np.float32)
            collection.upsert(
                part, vectors, part, [None] * len(part), mode="vector", embedding_model=None
            )
    return ids


def run(collection: Collection, ids: list[str], dim: int, hold_lock: bool) -> dict[str, Any]:
    if hold_lock:  # compaction as it used to be: under the collection's write lock
        compact = collection._compact_if_due
        collection._compact_if_due = lambda: _locked(collection, compact)  # type: ignore[method-assign]
    query = np.random.default_rng(1).standard_normal(dim).astype(np.float32)
    latencies: list[float] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set() and len(latencies) < 100_000:
            start = time.perf_counter()
            collection.search(query, 10)
            latencies.append(time.perf_counter() - start)

    for _ in range(20):  # warm-up
        collection.search(query, 10)
    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.2)
    started = time.perf_counter()
    collection.delete([ids[0]])  # dead rows reach the live ones: compacts
    took = time.perf_counter() - started
    time.sleep(0.2)
    done.set()
    thread.join(60)
    ms = sorted(x * 1000 for x in latencies)
    return {
        "delete_with_compaction_ms": round(took * 1000, 1),
        "searches": len(ms),
        "search_median_ms": round(statistics.median(ms), 2),
        "search_max_ms": round(ms[-1], 1),
    }


def _locked(collection: Collection, compact: Any) -> None:
    with collection._lock.write():
        compact()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=Path("benches/results/compaction_search.json"))
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {"searches_go_on": [], "lock_held": []}
    for round_no in range(args.rounds):  # alternate, so load drifts hit both alike
        for mode in ("searches_go_on", "lock_held"):
            with tempfile.TemporaryDirectory() as tmp:
                store = Store(Path(tmp))
                collection = store.edge()
                ids = fill_one_delete_short_of_compaction(collection, args.n, args.dim, round_no)
                result = run(collection, ids, args.dim, hold_lock=mode == "lock_held")
                store.close()
            results[mode].append(result)
            print(round_no, mode, result, flush=True)
    summary = {
        mode: {
            key: statistics.median(r[key] for r in rows)
            for key in ("delete_with_compaction_ms", "search_median_ms", "search_max_ms")
        }
        for mode, rows in results.items()
    }
    report = {
        "n": args.n,
        "dim": args.dim,
        "rounds": args.rounds,
        "medians": summary,
        "runs": results,
    }
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
