"""The moorcheh-edge store at scale, through the HTTP API of a real server:
upload N x d vectors in batches of 1,000 (vector mode, --max-items 0), then
restart and time until /health answers, then time /search.

    .venv/bin/python benches/store_scale.py [--n 1000000] [--dim 384] [--clients 2]

Request bodies are serialised before the clock starts (orjson, float32
values), so the rate is the server's. Client and server share the 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import orjson
import requests

from tests.http_client import ServerProcess, free_port, start_server


def start(data_dir: Path, port: int) -> ServerProcess:
    return start_server(
        [
            "--no-llm",
            "--no-embedder",
            "--max-items",
            "0",
            "--max-body-mb",
            "256",
            "--data-dir",
            str(data_dir),
        ],
        port=port,
        timeout=120,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"serialising {args.n:,} x {args.dim} ...", flush=True)
    bodies = []
    for lo in range(0, args.n, args.batch):
        hi = min(args.n, lo + args.batch)
        vectors = rng.standard_normal((hi - lo, args.dim), dtype=np.float32)
        items = [{"id": f"doc-{i}", "vector": vectors[i - lo]} for i in range(lo, hi)]
        bodies.append(
            orjson.dumps(
                {"store_mode": "vector", "items": items}, option=orjson.OPT_SERIALIZE_NUMPY
            )
        )
    queries = rng.standard_normal((20, args.dim), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = start(data_dir, port)
        next_body = iter(bodies)
        lock = threading.Lock()
        failures: list[str] = []

        def client() -> None:
            session = requests.Session()
            while True:
                with lock:
                    body = next(next_body, None)
                if body is None:
                    return
                r = session.post(
                    base + "/upload",
                    data=body,
                    timeout=120,
                    headers={"Content-Type": "application/json"},
                )
                if r.status_code != 200:
                    failures.append(r.text)
                    return

        started = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        if failures:
            raise SystemExit(f"upload failed: {failures[0]}")
        total = requests.get(base + "/health", timeout=10).json()["items"]
        print(
            f"uploaded {total:,} vectors in {elapsed:.1f} s: {total / elapsed:,.0f} vectors/s "
            f"({args.clients} clients, batches of {args.batch})"
        )
        server.stop()
        readies = []
        for _ in range(3):
            server = start(data_dir, port)
            readies.append(server.ready_s)
            latencies = []
            session = requests.Session()
            for q in queries:
                t0 = time.perf_counter()
                r = session.post(
                    base + "/search",
                    data=orjson.dumps({"query": q, "top_k": 10}, option=orjson.OPT_SERIALIZE_NUMPY),
                    headers={"Content-Type": "application/json"},
                    timeout=30,
                )
                latencies.append(time.perf_counter() - t0)
                assert len(r.json()["results"]) == 10
            server.stop()
        print(
            f"restart until /health answers: median {statistics.median(readies):.2f} s "
            f"(runs: {', '.join(f'{r:.2f}' for r in readies)})"
        )
        print(
            f"/search over HTTP after restart: median {statistics.median(latencies) * 1000:.1f} ms,"
            f" first {latencies[0] * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
