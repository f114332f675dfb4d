"""Overload: 50 clients post /answer at once to a real server on the default
models. Each must get its answer (served in arrival order) or an immediate 503
with Retry-After; the server must stay up with bounded memory.

    .venv/bin/python benches/serving/overload.py [--clients 50]

Results: benches/results/overload.json (FIFO order itself is tested in tests/test_llm_queue.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import requests

from benches.serving.load_probe import sample, summary_ms
from tests.http_client import start_server

DOCS = [
    {
        "id": "museum",
        "text": "The Calder City Museum is open Tuesday to Sunday and closed on Mondays.",
    },
    {"id": "bridge", "text": "The Harlow Bridge opened in 1998. It is 412 metres long."},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(["--data-dir", str(Path(tmp) / "data")], Path(tmp) / "log")
        try:
            base = server.base
            r = requests.post(
                base + "/upload", json={"store_mode": "text", "items": DOCS}, timeout=60
            )
            r.raise_for_status()
            before = sample(server.proc.pid)
            results: list[tuple[int, float, float, str | None]] = []
            lock = threading.Lock()
            start = threading.Barrier(args.clients)

            def client(n: int) -> None:
                start.wait()
                sent = time.perf_counter()
                try:
                    resp = requests.post(
                        base + "/answer",
                        json={"query": "When did the Harlow Bridge open?"},
                        timeout=300,
                    )
                    status, retry = resp.status_code, resp.headers.get("Retry-After")
                except requests.RequestException:
                    status, retry = -1, None
                done = time.perf_counter()
                with lock:
                    results.append((status, sent, done, retry))

            peak = before.rss_mb
            threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 600
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                peak = max(peak, sample(server.proc.pid).rss_mb)
                time.sleep(0.2)
            for t in threads:
                t.join(5)
            alive = requests.get(base + "/health", timeout=10).ok
            after = sample(server.proc.pid)
        finally:
            server.stop()
    served = sorted(r for r in results if r[0] == 200)
    refused = [r for r in results if r[0] == 503]
    other = [r for r in results if r[0] not in (200, 503)]
    report = {
        "clients": args.clients,
        "served": len(served),
        "refused_503": len(refused),
        "other": sorted({r[0] for r in other}),
        "refusals_with_retry_after": sum(1 for r in refused if r[3] is not None),
        "refusal_latency": summary_ms([r[2] - r[1] for r in refused]),
        "served_latency": summary_ms([r[2] - r[1] for r in served]),
        "server_alive_after": alive,
        "rss_mb": {
            "before": round(before.rss_mb, 1),
            "peak": round(peak, 1),
            "after": round(after.rss_mb, 1),
        },
        "threads": {"before": before.threads, "after": after.threads},
        "fds": {"before": before.fds, "after": after.fds},
    }
    out = Path("benches/results/overload.json")
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    ok = not other and alive and report["refusals_with_retry_after"] == len(refused)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
