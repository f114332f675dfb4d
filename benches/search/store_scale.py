"""The moorcheh-edge store at scale, through the HTTP API of a real server:
upload N x d vectors as JSON (batches of 1,000) and as binary (multipart:
a .npy part and the ids, batches of --npy-batch rows), each into a fresh
store (vector mode, --max-items off), then restart and time until /health
answers, then time /search. Then what one batch of each format costs per
step, in-process (medians): the old JSON parse (orjson into Python floats)
beside simcore's split of the same body, validation, the vector checks, the
multipart parse and the store's write. And the two limits: the CPU seconds
server and clients spent per upload (what the cores alone would allow), and
the MB/s the disk takes durably (written and fdatasync'd) over the bytes
simcore stores per vector.

    .venv/bin/python benches/search/store_scale.py [--n 1000000] [--dim 384] [--clients 2]
        [--formats json npy] [--json results.json]

Request bodies are serialised before the clock starts (orjson float32 values;
urllib3's multipart encoder), so the rate is the server's, durable writes
included (each batch is fsync'd before its reply). Client and server share
the 2 cores.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import requests
from urllib3 import encode_multipart_formdata

from tests.http_client import ServerProcess, free_port, start_server


def start(data_dir: Path, port: int) -> ServerProcess:
    return start_server(
        [
            "--no-llm",
            "--no-embedder",
            "--max-items",
            "off",
            "--max-body-mb",
            "256",
            "--data-dir",
            str(data_dir),
        ],
        port=port,
        timeout=120,
    )


def json_bodies(
    vectors: np.ndarray, batch: int, prefix: str = "doc-"
) -> Iterator[tuple[bytes, str]]:
    for lo in range(0, len(vectors), batch):
        items = [{"id": f"{prefix}{i}", "vector": vectors[i]} for i in range(lo, lo + batch)]
        body = orjson.dumps(
            {"store_mode": "vector", "items": items}, option=orjson.OPT_SERIALIZE_NUMPY
        )
        yield body, "application/json"


def npy_bodies(
    vectors: np.ndarray, batch: int, prefix: str = "doc-"
) -> Iterator[tuple[bytes, str]]:
    for lo in range(0, len(vectors), batch):
        hi = min(len(vectors), lo + batch)
        npy = io.BytesIO()
        np.save(npy, vectors[lo:hi])
        ids = "\n".join(f"{prefix}{i}" for i in range(lo, hi)).encode()
        yield encode_multipart_formdata(
            {"vectors": ("v.npy", npy.getvalue()), "ids": ("ids.txt", ids)}
        )


def upload(base: str, bodies: list[tuple[bytes, str]], clients: int) -> float:
    """Seconds to send every body, `clients` at a time."""
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
            data, content_type = body
            r = session.post(
                base + "/upload", data=data, timeout=300, headers={"Content-Type": content_type}
            )
            if r.status_code != 200:
                failures.append(r.text)
                return

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"upload failed: {failures[0][:500]}")
    return elapsed


def breakdown(dim: int, json_batch: int, npy_batch: int, repeats: int = 7) -> dict[str, float]:
    """Median milliseconds per step of one batch, in-process, into a fresh store."""
    from flask import Flask
    from werkzeug.test import EnvironBuilder

    from flask_app import simcore
    from flask_app.api.http.json_body import parse_object, validate
    from flask_app.api.http.vectors import check_matrix
    from flask_app.api.moorcheh import bulk
    from flask_app.api.moorcheh.schemas import Upload
    from flask_app.store import Store

    rng = np.random.default_rng(1)
    steps: dict[str, list[float]] = {}

    def step(name: str, t0: float) -> float:
        t1 = time.perf_counter()
        steps.setdefault(name, []).append(t1 - t0)
        return t1

    app = Flask("breakdown")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "data")
        edge = store.edge()
        for b in range(repeats):
            vectors = rng.standard_normal((json_batch, dim), dtype=np.float32)
            body, _ = next(json_bodies(vectors, json_batch, prefix=f"j{b}-"))
            t = time.perf_counter()
            orjson.loads(body)
            t = step(f"JSON {json_batch}: orjson.loads (the previous parse)", t)
            split = simcore.split_upload(body)
            assert split is not None
            _, rest, matrix, _ = split
            t = step(f"JSON {json_batch}: simcore.split_upload", t)
            items = validate(Upload, parse_object(rest)).items
            t = step(f"JSON {json_batch}: the rest parsed and validated", t)
            assert matrix is not None
            matrix = check_matrix(matrix, str, 1, 4096)
            t = step(f"JSON {json_batch}: vector checks", t)
            ids, texts = [i.id for i in items], [i.content() for i in items]
            edge.upsert(ids, matrix, texts, [None] * len(ids), mode="vector", embedding_model=None)
            step(f"JSON {json_batch}: store write (fsync'd)", t)

            vectors = rng.standard_normal((npy_batch, dim), dtype=np.float32)
            body, content_type = next(npy_bodies(vectors, npy_batch, prefix=f"n{b}-"))
            environ = EnvironBuilder(
                method="POST", input_stream=io.BytesIO(body), content_type=content_type
            ).get_environ()
            with app.request_context(environ) as context:
                t = time.perf_counter()
                parsed = bulk.parse(context.request)
                t = step(f".npy {npy_batch}: multipart parse", t)
            edge.upsert(
                parsed.ids,
                parsed.vectors,
                parsed.texts,
                parsed.metadata,
                mode="vector",
                embedding_model=None,
            )
            step(f".npy {npy_batch}: store write (fsync'd)", t)
        store.close()
    return {name: round(statistics.median(v) * 1e3, 2) for name, v in steps.items()}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process `pid` has used, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def durable_write_bandwidth(directory: Path, megabytes: int = 32, repeats: int = 5) -> float:
    """MB/s this disk takes durably: `megabytes` written then fdatasync'd,
    median of `repeats` (into one file, each write after the last)."""
    block = np.random.default_rng(2).integers(0, 256, megabytes << 20, dtype=np.uint8).tobytes()
    rates = []
    with tempfile.NamedTemporaryFile(dir=directory) as f:
        fd = f.fileno()
        for n in range(repeats):
            t = time.perf_counter()
            os.pwrite(fd, block, n * len(block))
            os.fdatasync(fd)
            rates.append(megabytes / (time.perf_counter() - t))
    return statistics.median(rates)


def stored_bytes_per_vector(dim: int, id_bytes: int) -> int:
    """What simcore writes (and fsyncs) per row: the f32 row (padded to 16
    lanes) and the int8 row (to 64), scale and code sum, the id with its length."""
    return -(-dim // 16) * 16 * 4 + -(-dim // 64) * 64 + 8 + 4 + id_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batch", type=int, default=1000, help="rows per JSON request")
    parser.add_argument("--npy-batch", type=int, default=20_000, help="rows per .npy request")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--formats", nargs="+", choices=["json", "npy"], default=["json", "npy"])
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((args.n, args.dim), dtype=np.float32)
    queries = rng.standard_normal((20, args.dim), dtype=np.float32)
    results: dict[str, object] = {"n": args.n, "dim": args.dim, "clients": args.clients}
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        for form in args.formats:
            print(f"serialising {args.n:,} x {args.dim} as {form} ...", flush=True)
            batch = args.batch if form == "json" else args.npy_batch
            make = json_bodies if form == "json" else npy_bodies
            bodies = list(make(vectors, batch))
            data_dir = Path(tmp) / form
            server = start(data_dir, port)
            server_cpu, client_cpu = cpu_seconds(server.proc.pid), cpu_seconds(os.getpid())
            elapsed = upload(base, bodies, args.clients)
            server_cpu = cpu_seconds(server.proc.pid) - server_cpu
            client_cpu = cpu_seconds(os.getpid()) - client_cpu
            del bodies
            total = requests.get(base + "/health", timeout=10).json()["items"]
            assert total == args.n, total
            rate = total / elapsed
            results[f"{form}_vectors_per_s"] = round(rate)
            results[f"{form}_batch"] = batch
            cores = os.cpu_count() or 1
            cpu_ceiling = total / ((server_cpu + client_cpu) / cores)
            results[f"{form}_cpu_s"] = {
                "server": round(server_cpu, 1),
                "client": round(client_cpu, 1),
            }
            results[f"{form}_cpu_ceiling_vectors_per_s"] = round(cpu_ceiling)
            print(
                f"{form}: uploaded {total:,} vectors in {elapsed:.1f} s: {rate:,.0f} vectors/s "
                f"({args.clients} clients, batches of {batch:,}); CPU: server {server_cpu:.1f} s, "
                f"clients {client_cpu:.1f} s, {(server_cpu + client_cpu) / elapsed:.2f} of "
                f"{cores} cores busy, which alone allow {cpu_ceiling:,.0f} vectors/s",
                flush=True,
            )
            server.stop()
        readies = []
        latencies: list[float] = []
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
        results["restart_s"] = round(statistics.median(readies), 2)
        results["search_ms"] = round(statistics.median(latencies) * 1000, 1)
        print(
            f"restart until /health answers: median {statistics.median(readies):.2f} s "
            f"(runs: {', '.join(f'{r:.2f}' for r in readies)})"
        )
        print(
            f"/search over HTTP after restart: median {statistics.median(latencies) * 1000:.1f} ms,"
            f" first {latencies[0] * 1000:.1f} ms"
        )
        bandwidth = durable_write_bandwidth(Path(tmp))
        per_vector = stored_bytes_per_vector(args.dim, len(f"doc-{args.n - 1}"))
        ceiling = bandwidth * (1 << 20) / per_vector
        results["disk_mb_per_s"] = round(bandwidth)
        results["disk_ceiling_vectors_per_s"] = round(ceiling)
        print(
            f"this disk takes {bandwidth:.0f} MB/s durably (32 MB written and fdatasync'd, median"
            f" of 5): at {per_vector:,} bytes a vector, at most {ceiling:,.0f} vectors/s"
        )
    steps = results["steps_ms"] = breakdown(args.dim, args.batch, args.npy_batch)
    for name, ms in steps.items():
        print(f"  {name}: {ms:.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
