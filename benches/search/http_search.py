"""`POST /search` over HTTP against the engine underneath it, same data, same run.

    .venv/bin/python benches/search/http_search.py [--sizes 1000 50000 200000 1000000] \
        [--dim 384] [--queries 120] [--kinds f32] [--llm] [--json out.json]

For each size: the moorcheh-edge store is filled in-process (random unit
vectors, an id and a short text each); for each index kind a real server
(`--no-embedder --store-index KIND`, and `--no-llm` unless `--llm`: the
chat model loaded and idle beside it) is started on it. Then, in separate
blocks with a pause between them (interleaved, one way's threads still
spinning slow the next): simcore's `Index.search` in this process over the
same files with the kind's scan and the server's threads; one client sending
vector queries (k 10, bodies serialised before the clock starts) over a
keep-alive `http.client` connection ("http") and through `requests`; and
NumPy (`X @ q` + argpartition) in this process. The breakdown times each
step of the request path in-process on the same collection: JSON parse,
validation, query vector checks, the scan, reading the k rows, building and
encoding the answer; "HTTP" is what the wire, waitress and Flask add on top.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import requests

from flask_app import simcore
from flask_app.index_kinds import INDEX_KINDS
from flask_app.inference.llama_runtime import available_cores
from flask_app.store import Store
from tests.http_client import free_port, start_server

K = 10
BATCH = 50_000
PAUSE_S = 1.0


def unit_matrix(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    matrix = rng.standard_normal((n, dim), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


def fill(data_dir: Path, matrix: np.ndarray) -> None:
    store = Store(data_dir)
    edge = store.edge()
    started = time.perf_counter()
    n = len(matrix)
    for lo in range(0, n, BATCH):
        hi = min(n, lo + BATCH)
        ids = [f"doc-{i}" for i in range(lo, hi)]
        texts = [f"passage {i}" for i in range(lo, hi)]
        edge.upsert(
            ids, matrix[lo:hi], texts, [None] * len(ids), mode="vector", embedding_model=None
        )
    print(f"  filled {n:,} rows in {time.perf_counter() - started:.0f} s", flush=True)
    store.close()


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3, 3),
    }


def scan_mode(kind: str) -> dict[str, Any]:
    """`Index.search`'s arguments for an index kind (the server's own)."""
    mode, oversample = INDEX_KINDS[kind]
    return {"mode": mode, "oversample": oversample}


def in_blocks(
    data_dir: Path, matrix: np.ndarray, queries: np.ndarray, kind: str, llm: bool
) -> dict[str, list[float]]:
    """Each way over every query, one way after another, a pause between."""
    port = free_port()
    args = ["--no-embedder", "--data-dir", str(data_dir), "--store-index", kind]
    server = start_server(([] if llm else ["--no-llm"]) + args, port=port, timeout=300)
    index = simcore.Index.open(data_dir / Store.EDGE_NAMESPACE / Store.EDGE_COLLECTION / "index")
    index.threads = available_cores()
    session = requests.Session()
    url = f"http://127.0.0.1:{port}/search"
    headers = {"Content-Type": "application/json"}
    bodies = [
        orjson.dumps({"query": q, "top_k": K}, option=orjson.OPT_SERIALIZE_NUMPY) for q in queries
    ]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def lean(i: int) -> None:
        connection.request("POST", "/search", body=bodies[i], headers=headers)
        r = connection.getresponse()
        body = r.read()
        if r.status != 200 or len(orjson.loads(body)["results"]) != min(K, len(matrix)):
            raise RuntimeError(f"/search answered {r.status}: {body[:200]!r}")

    def with_requests(i: int) -> None:
        r = session.post(url, data=bodies[i], headers=headers, timeout=30)
        if r.status_code != 200:
            raise RuntimeError(f"/search answered {r.status_code}: {r.text[:200]}")

    def flat(i: int) -> None:
        scores = matrix @ queries[i]
        top = np.argpartition(-scores, K)[:K]
        top[np.argsort(-scores[top])]

    ways: dict[str, Callable[[int], object]] = {
        "Index.search": lambda i: index.search(queries[i], K, **scan_mode(kind)),
        "http": lean,
        "http (requests)": with_requests,
        "numpy": flat,
    }
    samples: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for name, way in ways.items():
            time.sleep(PAUSE_S)  # the last block's threads park first
            for i in range(len(queries)):
                t = time.perf_counter()
                way(i)
                if i >= 5:  # the first few warm caches
                    samples[name].append(time.perf_counter() - t)
    finally:
        server.stop()
    return samples


def breakdown(data_dir: Path, queries: np.ndarray, kind: str) -> dict[str, float]:
    """Median milliseconds per step of the request path, in-process."""
    from flask_app.api.http.json_body import validate
    from flask_app.api.moorcheh import scores
    from flask_app.api.moorcheh.routes import parse_vector
    from flask_app.api.moorcheh.schemas import Search
    from flask_app.store.unit import unit_rows

    store = Store(data_dir, search_threads=available_cores(), edge_index=kind)
    edge = store.edge()
    steps: dict[str, list[float]] = {}

    def step(name: str, t0: float) -> float:
        t1 = time.perf_counter()
        steps.setdefault(name, []).append(t1 - t0)
        return t1

    try:
        for n, q in enumerate(queries):
            body = orjson.dumps({"query": q, "top_k": K}, option=orjson.OPT_SERIALIZE_NUMPY)
            t = time.perf_counter()
            raw = orjson.loads(body)
            t = step("json parse", t)
            parsed = validate(Search, raw)
            t = step("validation", t)
            assert not isinstance(parsed.query, str)
            vector = parse_vector(parsed.query, "query")
            unit_rows(vector.reshape(1, -1))
            t = step("query vector checks", t)
            index = edge._index
            assert index is not None
            ids, _ = index.search(vector, K, **scan_mode(kind))
            t = step("scan (Index.search)", t)
            with edge._reading():
                edge._rows(ids)
            t = step("read k rows (SQLite)", t)
            hits = edge.search(vector, K)
            t = time.perf_counter()
            results = [scores.result(h, "clip") for h in hits]
            orjson.dumps({"results": results, "execution_time": 0.0})
            step("build + encode answer", t)
            if n < 5:
                steps.clear()  # warm-up
    finally:
        store.close()
    return {name: round(statistics.median(v) * 1e3, 3) for name, v in steps.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 50_000, 200_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=120)
    parser.add_argument("--kinds", nargs="+", choices=list(INDEX_KINDS), default=["f32"])
    parser.add_argument("--llm", action="store_true", help="the chat model loaded, idle")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    report: dict[str, Any] = {
        "k": K,
        "dim": args.dim,
        "threads": available_cores(),
        "llm_loaded": args.llm,
        "sizes": {},
    }
    for n in args.sizes:
        print(f"{n:,} x {args.dim}", flush=True)
        matrix = unit_matrix(n, args.dim, rng)
        queries = unit_matrix(args.queries, args.dim, rng)
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp) / "data"
            fill(data_dir, matrix)
            for kind in args.kinds:
                print(f"  index {kind}", flush=True)
                samples = in_blocks(data_dir, matrix, queries, kind, args.llm)
                steps = breakdown(data_dir, queries, kind)
                row: dict[str, Any] = {name: percentiles(v) for name, v in samples.items()}
                row["steps_ms"] = steps
                row["http_minus_scan_p50_ms"] = round(
                    row["http"]["p50_ms"] - row["Index.search"]["p50_ms"], 3
                )
                row["http_over_numpy"] = round(row["http"]["p50_ms"] / row["numpy"]["p50_ms"], 3)
                report["sizes"][f"{n} {kind}"] = row
                print(f"  {'':24} {'p50 ms':>8} {'p99 ms':>8}")
                for name in ("Index.search", "http", "http (requests)", "numpy"):
                    print(f"  {name:24} {row[name]['p50_ms']:8.2f} {row[name]['p99_ms']:8.2f}")
                print(f"  HTTP - scan (p50)        {row['http_minus_scan_p50_ms']:8.2f}")
                print(f"  HTTP / numpy (p50)       {row['http_over_numpy']:8.2f}")
                print("  where it goes (in-process medians):")
                for name, ms in steps.items():
                    print(f"    {name:26} {ms:7.3f} ms")
        del matrix
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
