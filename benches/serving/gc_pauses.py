"""What Python's garbage collector costs a served request, with and without
the start-up objects frozen (`flask_app.gc_tuning`, as `edgerag serve` does).

Each setting in its own process: a 1,000-row store, edgerag's app (with
`--models`, the default LLM and embedder loaded too, as served), 200 warm-up
calls, then `--calls` in-process WSGI calls of `POST /search` while
`gc.callbacks` time every collection. Printed per setting: the objects a
full collection walks, the time of one, the pauses per generation, and the
calls' p50 / p99 / p99.9 / max.

    .venv/bin/python benches/serving/gc_pauses.py [--calls 20000] [--models]
        [--json benches/results/gc_pauses.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

SETTINGS = ("as before", "start-up objects frozen")


def measure(setting: str, calls: int, models: bool) -> dict[str, Any]:
    """One setting, in this process."""
    from benches.search.request_path import edgerag_app, fill, search_call
    from flask_app.gc_tuning import freeze_startup_objects

    logging.basicConfig(level="INFO", stream=open(os.devnull, "w"), force=True)  # noqa: SIM115
    with tempfile.TemporaryDirectory() as tmp:
        matrix = fill(Path(tmp), np.random.default_rng(0))
        app = edgerag_app(Path(tmp), models)
        if setting == SETTINGS[1]:
            freeze_startup_objects()
        call = search_call(app, orjson.dumps({"query": matrix[3].tolist(), "top_k": 10}))
        for _ in range(200):
            call()
        pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        started = [0.0]

        def timer(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                pauses[info["generation"]].append((time.perf_counter() - started[0]) * 1e3)

        gc.callbacks.append(timer)
        latencies = []
        for _ in range(calls):
            t = time.perf_counter()
            call()
            latencies.append((time.perf_counter() - t) * 1e3)
        gc.callbacks.remove(timer)
        walked = len(gc.get_objects())  # frozen ones are not listed
        t = time.perf_counter()
        gc.collect()
        full_ms = (time.perf_counter() - t) * 1e3
    latencies.sort()

    def at(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)

    return {
        "setting": setting,
        "objects_a_full_collection_walks": walked,
        "full_collection_ms": round(full_ms, 2),
        "pauses": {
            f"gen{g}": {
                "count": len(p),
                "median_ms": round(statistics.median(p), 3) if p else None,
                "max_ms": round(max(p), 2) if p else None,
            }
            for g, p in pauses.items()
        },
        "call_ms": {"p50": at(0.5), "p99": at(0.99), "p99.9": at(0.999), "max": at(1.0)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--models", action="store_true", help="load the default models too")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--setting", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setting is not None:  # a child: one setting
        print(json.dumps(measure(args.setting, args.calls, args.models)))
        return
    results = []
    for setting in SETTINGS:
        command = [sys.executable, "-m", "benches.gc_pauses", "--calls", str(args.calls)]
        command += ["--setting", setting] + (["--models"] if args.models else [])
        out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=900)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(result)
        calls = result["call_ms"]
        print(
            f"{setting}: {result['objects_a_full_collection_walks']:,} objects walked, a full "
            f"collection {result['full_collection_ms']} ms; pauses "
            + ", ".join(
                f"{g} {p['count']} (max {p['max_ms']} ms)" for g, p in result["pauses"].items()
            )
            + f"; calls p50 {calls['p50']} p99 {calls['p99']} p99.9 {calls['p99.9']}"
            f" max {calls['max']} ms",
            flush=True,
        )
    if args.json:
        args.json.write_text(
            json.dumps({"calls": args.calls, "models": args.models, "results": results}, indent=2)
            + "\n"
        )


if __name__ == "__main__":
    main()
