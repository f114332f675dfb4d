"""What a request costs apart from the scan: `POST /search` over HTTP on a
1,000-row store (the scan ~0.1 ms), three servers in their own processes,
measured in turn by one keep-alive `http.client` client:

- `bare`: Flask on plain waitress, a route that parses the query with orjson
  and returns ten results (the floor of this stack on this machine);
- `hooks`: edgerag's app and server (its waitress channel and parser, auth,
  admission, metrics, request ids, the request log) with the same stub route;
- `edgerag`: the real `/search`;
- `edgerag-lookahead` (asked for with `--servers`): the same, its server
  reading every request's socket while the request runs (waitress'
  lookahead), as it did before it read only for the requests that ask;
- `bare-granian`, `edgerag-granian` (asked for with `--servers`): the first
  and the last on granian's WSGI interface instead of waitress (granian is
  not one of edgerag's dependencies: `pip install granian==2.8.7` first).

    .venv/bin/python benches/search/request_path.py [--rounds 5] [--requests 300]
        [--servers bare hooks edgerag edgerag-lookahead bare-granian edgerag-granian]
        [--json benches/results/request_path.json]

Then the real route once more, in-process (a WSGI call without a socket),
profiled: the cumulative milliseconds of its steps per request.
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import io
import json
import logging
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import requests

from tests.http_client import free_port

ROWS, DIM = 1000, 384
KINDS = ("bare", "hooks", "edgerag", "edgerag-lookahead", "bare-granian", "edgerag-granian")
RESULTS = [{"id": f"doc-{i}", "score": 0.5, "text": f"passage {i}"} for i in range(10)]


def fill(data_dir: Path, rng: np.random.Generator) -> np.ndarray:
    from flask_app.store import Store

    matrix = rng.standard_normal((ROWS, DIM), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    store = Store(data_dir)
    ids = [f"doc-{i}" for i in range(ROWS)]
    texts = [f"passage {i}" for i in range(ROWS)]
    store.edge().upsert(ids, matrix, texts, [None] * ROWS, mode="vector", embedding_model=None)
    store.close()
    return matrix


def edgerag_app(data_dir: Path, models: bool = False) -> Any:
    """edgerag's app over `data_dir`; with `models`, the default LLM and embedder too."""
    from flask_app.app import create_app
    from flask_app.services import load_services
    from flask_app.settings import Settings

    options: dict[str, Any] = {"data_dir": data_dir}
    if not models:
        options.update(no_llm=True, no_embedder=True)
    settings = Settings.load(options, {})
    return create_app(settings, load_services(settings))


def search_call(app: Any, body: bytes) -> Callable[[], None]:
    """One in-process WSGI call of `POST /search` with `body`, no socket."""
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(
        method="POST", path="/search", data=body, content_type="application/json"
    ).get_environ()

    def call() -> None:
        env = {**environ, "wsgi.input": io.BytesIO(body)}
        b"".join(app(env, lambda status, headers, exc_info=None: None))

    return call


def stub() -> Any:
    from flask import Response, request

    query = orjson.loads(request.get_data())
    np.asarray(query["query"], dtype=np.float32)
    return Response(orjson.dumps({"results": RESULTS}), mimetype="application/json")


def bare_app() -> Any:
    from flask import Flask

    app = Flask("bare")
    app.post("/search")(stub)
    return app


def granian_target() -> Any:
    """The WSGI app a granian worker serves (its kind and data in the environment)."""
    logging.basicConfig(level="INFO", stream=open(os.devnull, "w"))  # noqa: SIM115
    from flask_app.gc_tuning import freeze_startup_objects

    if os.environ["REQUEST_PATH_KIND"] == "bare-granian":
        return bare_app()
    app = edgerag_app(Path(os.environ["REQUEST_PATH_DATA"]))
    freeze_startup_objects()  # as `edgerag serve` does
    return app


def serve(kind: str, port: int, data_dir: Path) -> None:
    """One server (runs in its own process; see main)."""
    from waitress.server import create_server

    from flask_app.api.http.waitress_server import make_server

    if kind.endswith("-granian"):
        from granian import Granian
        from granian.constants import Interfaces

        os.environ.update(REQUEST_PATH_KIND=kind, REQUEST_PATH_DATA=str(data_dir))
        Granian(
            "benches.request_path:granian_target",
            address="127.0.0.1",
            port=port,
            interface=Interfaces.WSGI,
            workers=1,
            blocking_threads=16,
            factory=True,
            log_enabled=False,
        ).serve()
        return
    # the request log as `edgerag serve` writes it, to nowhere
    logging.basicConfig(level="INFO", stream=open(os.devnull, "w"))  # noqa: SIM115
    if kind == "bare":
        create_server(bare_app(), host="127.0.0.1", port=port, threads=16).run()
        return
    from flask_app.gc_tuning import freeze_startup_objects

    app = edgerag_app(data_dir)
    if kind == "hooks":
        app.view_functions["moorcheh.search"] = stub
    freeze_startup_objects()  # as `edgerag serve` does
    server = make_server(app, host="127.0.0.1", port=port, threads=16)
    if kind == "edgerag-lookahead":  # every request "asks" from its start
        always = property(lambda _: True, lambda _, value: None)
        server.channel_class = type("Reading", (server.channel_class,), {"watching": always})
    server.run()


def timed(port: int, body: bytes, count: int) -> list[float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    samples = []
    for i in range(count + 20):
        t = time.perf_counter()
        connection.request("POST", "/search", body=body, headers=headers)
        reply = connection.getresponse()
        reply.read()
        if reply.status != 200:
            raise RuntimeError(f"/search answered {reply.status}")
        if i >= 20:  # warm-up
            samples.append(time.perf_counter() - t)
    connection.close()
    return samples


def profiled(data_dir: Path, body: bytes, count: int) -> dict[str, float]:
    """Cumulative ms per request of the route's steps, in-process."""
    logging.basicConfig(level="INFO", stream=open(os.devnull, "w"), force=True)  # noqa: SIM115
    call = search_call(edgerag_app(data_dir), body)
    for _ in range(100):
        call()
    t = time.perf_counter()
    for _ in range(count):
        call()
    per_request = (time.perf_counter() - t) / count
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(count):
        call()
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    wanted = {  # (file, function) -> step
        ("flask/app.py", "wsgi_app"): "the WSGI call (profiled)",
        ("flask/app.py", "preprocess_request"): "before-request hooks (auth, admission, metrics)",
        ("flask/app.py", "process_response"): "after-request hooks (metrics, request log, Allow)",
        ("moorcheh/routes.py", "search"): "the route",
        ("http/json_body.py", "json_object"): "  body read and parsed",
        ("moorcheh/routes.py", "_query_vector"): "  query vector checks",
        ("rag/pipeline.py", "retrieve"): "  retrieval (scan, ranking, rows)",
        ("store/collection.py", "_rows"): "    the k rows from SQLite",
        ("~", "<method 'rescorable' of 'flask_app.simcore.Index' objects>"): "    the scan",
        ("flask/json/__init__.py", "jsonify"): "  answer encoded",
    }
    found = {}
    for (filename, _, function), (_, _, _, cumulative, _) in stats.items():
        for (where, func), name in wanted.items():
            if filename.endswith(where) and function == func:
                found[name] = round(cumulative / count * 1e3, 3)
    out = {"WSGI call, unprofiled": round(per_request * 1e3, 3)}
    out.update((name, found[name]) for name in wanted.values() if name in found)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--servers", nargs="+", choices=KINDS, default=list(KINDS[:3]))
    parser.add_argument(
        "--serve", nargs=3, metavar=("KIND", "PORT", "DATA"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), Path(args.serve[2]))
        return
    kinds = tuple(args.servers)
    if any(k.endswith("-granian") for k in kinds):
        try:
            import granian  # noqa: F401
        except ImportError:
            parser.error("the granian servers need granian: pip install granian==2.8.7")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "data"
        matrix = fill(source, rng)
        body = orjson.dumps({"query": matrix[3], "top_k": 10}, option=orjson.OPT_SERIALIZE_NUMPY)
        servers = {}
        for kind in kinds:
            data_dir = Path(tmp) / kind
            shutil.copytree(source, data_dir)  # one server per data directory
            port = free_port()
            command = [sys.executable, __file__, "--serve", kind, str(port), str(data_dir)]
            # a session of its own: granian's workers go with their server
            servers[kind] = (port, subprocess.Popen(command, start_new_session=True))
        try:
            for port, _ in servers.values():
                deadline = time.monotonic() + 60
                while True:
                    try:
                        requests.post(f"http://127.0.0.1:{port}/search", data=body, timeout=1)
                        break
                    except requests.ConnectionError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
            samples: dict[str, list[float]] = {kind: [] for kind in kinds}
            medians: dict[str, list[float]] = {kind: [] for kind in kinds}
            for _ in range(args.rounds):
                for kind, (port, _) in servers.items():
                    got = timed(port, body, args.requests)
                    samples[kind] += got
                    medians[kind].append(statistics.median(got) * 1e3)
        finally:
            for _, process in servers.values():
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        report: dict[str, Any] = {"rows": ROWS, "dim": DIM, "servers": {}}
        for kind in kinds:
            ordered = sorted(samples[kind])
            row = {
                "p50_ms": round(statistics.median(ordered) * 1e3, 3),
                "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1e3, 3),
                "round_medians_ms": [round(m, 3) for m in medians[kind]],
            }
            report["servers"][kind] = row
            print(f"{kind:17s} p50 {row['p50_ms']:.3f} ms  p99 {row['p99_ms']:.3f} ms", flush=True)
        report["steps_ms"] = profiled(source, body, args.requests)
        for name, ms in report["steps_ms"].items():
            print(f"  {name}: {ms:.3f} ms")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
