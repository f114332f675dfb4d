"""Time to an answer with the real models, over a real socket (waitress).

    .venv/bin/python benches/serving/answer_latency.py [--llm NAME] [--repeats 3] \
        [--json out.json]

1. **The answer path's time split**, as served: each question streamed from
   /answer/stream (top_k 5) on the `own` set's documents and on the README
   tour's two notes; time to first token and total (medians), and the
   server's own split of it (`timing` in the `done` event): reading the
   prompt, writing the candidates, the verifier reading them, how many were
   written. The baseline in the same run: the same server with the verifier
   off (`--answer-probe off`: the first answer streams as it is written).

    .venv/bin/python benches/serving/answer_latency.py --clients 1 2 4 [--rounds 3] \
        [--json out.json]

2. **Several clients at once**: N clients released together streaming the
   same questions between them (each its share, one after another), per
   round: answers per minute, time to first token p50 / p95, and how many
   answers differ from the one-client run's. Two servers in the same run:
   as served (the batch engine decodes every admitted request's tokens in
   one step) and, as the baseline, one whose model has only the sequences
   one question needs (`--llm-sequences` = 1 + the verifier's samples), so
   requests are answered one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import requests
import sseclient

from benches.serving.tour import TOUR, TOUR_QUESTIONS
from flask_app.app import create_app
from flask_app.inference.presets import DEFAULT_LLM, PRESETS
from flask_app.rag.verifier import choose_gate
from flask_app.services import load_services
from flask_app.settings import Settings
from tests.http_client import serve_in_thread

HERE = Path(__file__).parent.parent / "quality" / "eval"
QUESTIONS = [
    "When did the Harlow Bridge open to traffic?",
    "How high is Mount Ketra?",
    "How many turbines does the Skerry wind farm have?",
    "What does error code E42 mean on the Printo 500?",
    "How many days of paid holiday do full-time employees get?",
    "How many hearts does an octopus have?",
    "What milk does the Tamsin cafe use by default?",
    "How much did the Harlow Bridge repairs cost?",
]


def kinds() -> dict[str, tuple[list[dict[str, Any]], list[str]]]:
    own = json.loads((HERE / "own" / "documents.json").read_text())["documents"]
    return {"tour": (TOUR, TOUR_QUESTIONS), "evaluation": (own, QUESTIONS)}


def streamed(base: str, query: str) -> dict[str, Any]:
    """One streamed answer: TTFT, total, its text and the server's timing."""
    start = time.perf_counter()
    response = requests.post(
        base + "/answer/stream",
        json={"query": query, "top_k": 5},
        stream=True,
        timeout=(5, 300),
    )
    first = None
    done: dict[str, Any] = {}
    for event in sseclient.SSEClient(response.iter_content(chunk_size=None)).events():
        if event.event == "token" and first is None:
            first = time.perf_counter()
        if event.event == "done":
            done = json.loads(event.data)
            break
        if event.event == "error":
            raise SystemExit(f"error event: {event.data}")
    end = time.perf_counter()
    response.close()
    return {
        "ttft_s": (first or end) - start,
        "total_s": end - start,
        "answer": done.get("answer"),
        "timing": done.get("timing") or {},
    }


@contextmanager
def server(llm: str, docs: list[dict[str, Any]], **overrides: Any) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "llm": llm, **overrides}, os.environ)
        services = load_services(settings)
        app = create_app(settings, services)
        r = app.test_client().post("/upload", json={"store_mode": "text", "items": docs})
        assert r.status_code == 200, r.get_json()
        try:
            with serve_in_thread(app, threads=settings.http_threads) as base:
                streamed(base, "warm up: the system prompt is cached from here on")
                yield base
        finally:
            if services.llm is not None:
                services.llm.close()
            services.store.close()


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def time_split(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"llm": args.llm, "repeats": args.repeats, "kinds": {}}
    for kind, (docs, questions) in kinds().items():
        rows: dict[str, Any] = {}
        for way, overrides in (("verified", {}), ("unverified", {"answer_probe": "off"})):
            runs = []
            with server(args.llm, docs, **overrides) as base:
                for _ in range(args.repeats):
                    runs += [streamed(base, q) for q in questions]
            rows[way] = {
                "ttft_p50_s": median([r["ttft_s"] for r in runs]),
                "total_p50_s": median([r["total_s"] for r in runs]),
                **{
                    f"{part}_p50_s": median([r["timing"].get(f"{part}_s") for r in runs])
                    for part in ("prefill", "candidates", "verify")
                },
                "candidates_mean": round(
                    float(np.mean([r["timing"].get("candidates", 0) for r in runs])), 2
                ),
            }
            print(kind, way, rows[way], flush=True)
        out["kinds"][kind] = rows
    return out


def closed_loop(
    base: str, questions: list[str], clients: int
) -> tuple[float, list[dict[str, Any]]]:
    """Every question streamed once by `clients` clients released together,
    each asking its share one after another: the wall time until the last
    answer ended, and each answer."""
    barrier = threading.Barrier(clients + 1)
    answers: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def client(i: int) -> None:
        barrier.wait()
        try:
            for query in questions[i::clients]:
                answers.append({"query": query, **streamed(base, query)})
        except BaseException as exc:  # reported after the join
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join(900)
    if failures:
        raise failures[0]
    return time.perf_counter() - started, answers


def clients_row(
    base: str, questions: list[str], n: int, rounds: int, alone: dict[str, str]
) -> dict[str, Any]:
    """One server, n clients at once, `rounds` times: answers per minute, time
    to first token, and how many answers differ from the first seen for each
    question (`alone`, filled by the first run)."""
    walls, ttfts, differ = [], [], 0
    for _ in range(rounds):
        wall, answers = closed_loop(base, questions, n)
        walls.append(wall)
        ttfts += [a["ttft_s"] for a in answers]
        for a in answers:
            alone.setdefault(a["query"], a["answer"])
            differ += a["answer"] != alone[a["query"]]
    return {
        "clients": n,
        "answers_per_min": round(60 * len(questions) / statistics.median(walls), 1),
        "ttft_p50_s": round(statistics.median(ttfts), 3),
        "ttft_p95_s": round(float(np.percentile(ttfts, 95)), 3),
        "answers_differing_from_the_first_run": differ,
    }


def several_clients(args: argparse.Namespace) -> dict[str, Any]:
    """Answers per minute and time to first token with N clients at once,
    the same questions for every N, batched and one at a time."""
    settings = Settings.load({"llm": args.llm}, os.environ)
    gate = choose_gate(args.llm, settings.llm_path(), None)
    one_at_a_time = 1 + (gate.verifier.samples if gate.verifier is not None else 0)
    ways = {"together": {}, "one_at_a_time": {"llm_sequences": one_at_a_time}}
    out: dict[str, Any] = {"llm": args.llm, "verifier": gate.describe(), "kinds": {}}
    for kind, (docs, questions) in kinds().items():
        rows = []
        alone: dict[str, str] = {}
        for way, overrides in ways.items():
            with server(args.llm, docs, **overrides) as base:
                for n in args.clients:
                    row = {"way": way, **clients_row(base, questions, n, args.rounds, alone)}
                    rows.append(row)
                    print(kind, row, flush=True)
        out["kinds"][kind] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", choices=list(PRESETS), default=DEFAULT_LLM)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", nargs="+", type=int, help="clients at once (see above)")
    parser.add_argument("--rounds", type=int, default=3, help="with --clients: rounds per N")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = several_clients(args) if args.clients else time_split(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
