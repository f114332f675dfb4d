"""Soak: mixed load on a real server with the default models for a fixed time
(search, text uploads that replace and delete, /answer, /answer/stream with
early disconnects), every loop bounded in count and time, all on 127.0.0.1.

Pass criteria: no status other than 2xx/503/429 and no connection error;
/health p99 < 100 ms; resident memory grows < 5 % after the warm-up; open
file descriptors and threads do not grow after the warm-up. (llama.cpp's
OpenMP keeps one helper team per HTTP thread that has called a model, so the
thread count rises during the warm-up until every HTTP thread has done so.)

    .venv/bin/python benches/serving/soak.py [--duration 600] [--warmup 60]

Results: benches/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import requests

from benches.serving.load_probe import ProcessSample, sample, summary_ms
from tests.http_client import start_server

TOPICS = ["bridge", "museum", "library", "harbour", "station", "garden", "tower", "market"]
FACTS = ["opened in {y}", "is closed on Mondays", "has {n} rooms", "was rebuilt in {y}"]


def passage(rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    fact = rng.choice(FACTS).format(y=rng.randint(1800, 2020), n=rng.randint(2, 90))
    return f"The {topic} of district {rng.randint(1, 40)} {fact}."


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: Counter[str] = Counter()
        self.errors: list[str] = []

    def record(self, route: str, status: int | str) -> None:
        with self.lock:
            self.statuses[f"{route} {status}"] += 1
            ok = isinstance(status, int) and (200 <= status < 300 or status in (429, 503))
            if not ok and len(self.errors) < 50:
                self.errors.append(f"{route} {status}")


def loop(deadline: float, pause: float, step: Callable[[], None], max_steps: int) -> None:
    for _ in range(max_steps):
        if time.monotonic() >= deadline:
            return
        step()
        time.sleep(pause)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--warmup", type=float, default=60.0)
    args = parser.parse_args()
    tally = Tally()
    health: list[tuple[float, float]] = []  # (time since start, latency)
    samples: list[tuple[float, ProcessSample]] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(["--data-dir", str(Path(tmp) / "data")], Path(tmp) / "log")
        base = server.base
        pid = server.proc.pid
        seed_rng = random.Random(0)
        seed = [{"id": f"doc{i}", "text": passage(seed_rng)} for i in range(200)]
        requests.post(
            base + "/upload", json={"store_mode": "text", "items": seed}, timeout=120
        ).raise_for_status()
        started = time.monotonic()
        deadline = started + args.duration

        def call(route: str, method: str, path: str, body: object = None) -> None:
            try:
                r = requests.request(method, base + path, json=body, timeout=120)
                tally.record(route, r.status_code)
            except requests.RequestException as exc:
                tally.record(route, type(exc).__name__)

        def searcher(n: int) -> Callable[[], None]:
            rng = random.Random(100 + n)
            return lambda: call(
                "search", "POST", "/search", {"query": f"{rng.choice(TOPICS)} opening", "top_k": 5}
            )

        up_rng = random.Random(7)

        def uploader() -> None:
            if up_rng.random() < 0.25:
                ids = [f"doc{up_rng.randrange(600)}" for _ in range(3)]
                call("delete", "DELETE", "/items", {"ids": ids})
                return
            items = [
                {"id": f"doc{k}", "text": passage(up_rng)} for k in up_rng.sample(range(600), 5)
            ]
            call("upload", "POST", "/upload", {"store_mode": "text", "items": items})

        def answerer(n: int) -> Callable[[], None]:
            rng = random.Random(200 + n)
            return lambda: call(
                "answer", "POST", "/answer", {"query": f"When did the {rng.choice(TOPICS)} open?"}
            )

        stream_rng = random.Random(9)

        def streamer() -> None:
            body = {"query": f"Is the {stream_rng.choice(TOPICS)} closed on Mondays?"}
            try:
                with requests.post(
                    base + "/answer/stream", json=body, stream=True, timeout=120
                ) as r:
                    tally.record("stream", r.status_code)
                    if r.status_code == 200:
                        leave_early = stream_rng.random() < 0.5
                        for i, _line in enumerate(r.iter_lines()):
                            if leave_early and i >= 3:
                                break  # the client disconnects mid-answer
            except requests.RequestException as exc:
                tally.record("stream", type(exc).__name__)

        def prober() -> None:
            t0 = time.perf_counter()
            try:
                r = requests.get(base + "/health", timeout=30)
                tally.record("health", r.status_code)
            except requests.RequestException as exc:
                tally.record("health", type(exc).__name__)
            health.append((time.monotonic() - started, time.perf_counter() - t0))

        def sampler() -> None:
            samples.append((time.monotonic() - started, sample(pid)))

        workers = [
            threading.Thread(target=loop, args=(deadline, 0.05, searcher(0), 100_000)),
            threading.Thread(target=loop, args=(deadline, 0.05, searcher(1), 100_000)),
            threading.Thread(target=loop, args=(deadline, 0.2, uploader, 100_000)),
            threading.Thread(target=loop, args=(deadline, 0.1, answerer(0), 100_000)),
            threading.Thread(target=loop, args=(deadline, 0.1, answerer(1), 100_000)),
            threading.Thread(target=loop, args=(deadline, 0.1, streamer, 100_000)),
            threading.Thread(target=loop, args=(deadline, 0.2, prober, 100_000)),
            threading.Thread(target=loop, args=(deadline, 5.0, sampler, 10_000)),
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(args.duration + 300)
        time.sleep(2)  # let the last connections close
        final = sample(pid)
        server.stop()

    after_warmup = [s for t, s in samples if t >= args.warmup]
    tail = after_warmup[-max(1, len(after_warmup) // 5) :]
    baseline = after_warmup[0] if after_warmup else final
    rss_growth = statistics.median(s.rss_mb for s in tail) / baseline.rss_mb - 1
    health_after = [lat for t, lat in health if t >= args.warmup]
    report = {
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "requests": dict(sorted(tally.statuses.items())),
        "errors": tally.errors,
        "health": summary_ms(health_after),
        "rss_mb": {
            "after_warmup": round(baseline.rss_mb, 1),
            "end_median": round(statistics.median(s.rss_mb for s in tail), 1),
            "growth_pct": round(rss_growth * 100, 2),
        },
        "fds": {"after_warmup": baseline.fds, "end": final.fds},
        "threads": {"after_warmup": baseline.threads, "end": final.threads},
    }
    checks = {
        "no errors": not tally.errors,
        "health p99 < 100 ms": report["health"]["p99_ms"] < 100,
        "rss growth < 5%": rss_growth < 0.05,
        "no fd leak": final.fds <= baseline.fds + 4,
        "no thread leak": final.threads <= baseline.threads,
    }
    report["checks"] = checks
    out = Path("benches/results/soak.json")
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    raise SystemExit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
