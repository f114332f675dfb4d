"""A sampling profile (py-spy) of a real server answering `POST /search`
in a loop, per store size: the Python work of each request, frame by frame.

    .venv/bin/python -m benches.search.profile_search [--sizes 1000 200000 1000000] \
        [--seconds 20] [--json out.json] [--stacks DIR]

For each size: the store is filled with random unit vectors (384-d), a real
`edgerag serve --no-llm --no-embedder` started on it, and one keep-alive
client sends top-10 vector queries for `--seconds` while py-spy samples the
thread holding the GIL (1,000 Hz, without pausing the server): Python's own
work per request (simcore's scan runs without the GIL, so it is not in
it), the socket loop's share of it, and the ten largest frames by their
own time; with `--stacks DIR`, py-spy's folded stacks per size (the input
of any flame graph tool: `flamegraph.pl`, speedscope, inferno).
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benches.search.http_search import fill, unit_matrix
from tests.http_client import free_port, start_server

RATE = 1000


def stacks(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw output: one `frame;frame;… count` line per stack."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        frames, _, count = line.rpartition(" ")
        out.append((frames.split(";"), int(count)))
    return out


def summary(samples: list[tuple[list[str], int]], requests_served: int) -> dict[str, Any]:
    """Milliseconds per request under the GIL: all, the socket loop's
    thread's, and the largest frames by their own (leaf) time."""
    per_request = 1e3 / RATE / requests_served
    leaves: collections.Counter[str] = collections.Counter()
    for frames, n in samples:
        leaves[frames[-1]] += n
    loop = sum(n for f, n in samples if "waitress-" not in f[0])  # not a worker thread
    return {
        "requests": requests_served,
        "python_ms": round(sum(n for _, n in samples) * per_request, 3),
        "socket_loop_ms": round(loop * per_request, 3),
        "largest_frames_ms": {k: round(v * per_request, 3) for k, v in leaves.most_common(10)},
    }


def profile(n: int, seconds: float, keep: Path | None) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        fill(data, unit_matrix(n, 384, rng))
        port = free_port()
        server = start_server(["--no-llm", "--no-embedder", "--data-dir", str(data)], port=port)
        queries = unit_matrix(200, 384, rng)
        bodies = [
            orjson.dumps({"query": q, "top_k": 10}, option=orjson.OPT_SERIALIZE_NUMPY)
            for q in queries
        ]
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Content-Type": "application/json"}

        def ask(i: int) -> None:
            connection.request("POST", "/search", body=bodies[i % len(bodies)], headers=headers)
            reply = connection.getresponse()
            reply.read()
            if reply.status != 200:
                raise RuntimeError(f"/search answered {reply.status}")

        try:
            for i in range(50):  # warm-up
                ask(i)
            raw = Path(tmp) / "raw.txt"
            recorder = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--pid",
                    str(server.proc.pid),
                    "--rate",
                    str(RATE),
                    "--nonblocking",
                    "--gil",
                    "--threads",
                    "--format",
                    "raw",
                    "--output",
                    str(raw),
                    "--duration",
                    str(int(seconds)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # py-spy attaches
            served, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds - 2 and recorder.poll() is None:
                ask(served)
                served += 1
            recorder.wait(seconds + 30)
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"search_{n}.folded").write_bytes(raw.read_bytes())
            return summary(stacks(raw), served)
        finally:
            connection.close()
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 200_000, 1_000_000])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--stacks", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {"rate_hz": RATE, "sizes": {}}
    for n in args.sizes:
        row = profile(n, args.seconds, args.stacks)
        report["sizes"][str(n)] = row
        print(
            f"{n:>9,} rows: {row['requests']} requests; Python per request {row['python_ms']} ms "
            f"(the socket loop {row['socket_loop_ms']} ms)",
            flush=True,
        )
        for frame, ms in list(row["largest_frames_ms"].items())[:6]:
            print(f"            {ms:7.3f} ms  {frame}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
