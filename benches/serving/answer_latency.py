"""Latency of /answer with the real default models, over a real socket
(waitress), in one run:

1. time to first token (TTFT) and total time with top_k 1, 3 and 5;
2. the stable system prompt reused from the KV cache (cold vs warm TTFT);
3. the server's overhead over calling llama-cpp-python directly with the
   exact prompt the server builds (same greedy output, same cache state);
4. as served: top_k 5 with the model's calibrated gates (the judge's prefill
   included when its preset asks the judge).
Steps 1-3 run with the gates off so that every question reaches the model.

    .venv/bin/python benches/serving/answer_latency.py [--llm NAME] [--repeats 5] [--json out.json]

With `--clients`, instead: N clients at once, as served, released
together, streaming the same 8 questions between them (each client its
share, one after another), per round; answers per minute and time to first
token p50 / p95 (from each request), on the README tour's two notes and on
the `own` set's documents.

    .venv/bin/python benches/serving/answer_latency.py --clients 1 2 4 8 [--rounds 3] \
        [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import requests
import sseclient

from benches.serving.tour import TOUR, TOUR_QUESTIONS
from flask_app import rag
from flask_app.api.http.extensions import answer_config_of
from flask_app.app import create_app
from flask_app.inference.llm import Sampling
from flask_app.inference.presets import DEFAULT_LLM, PRESETS
from flask_app.rag.answer import ground
from flask_app.rag.retrieval import StoredCollection
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


def stream_times(base: str, payload: dict[str, Any]) -> tuple[float, float]:
    start = time.perf_counter()
    response = requests.post(base + "/answer/stream", json=payload, stream=True, timeout=(5, 120))
    first = None
    for event in sseclient.SSEClient(response.iter_content(chunk_size=None)).events():
        if event.event == "token" and first is None:
            first = time.perf_counter()
        if event.event in ("done", "error"):
            break
    end = time.perf_counter()
    response.close()
    return (first or end) - start, end - start


def closed_loop(base: str, questions: list[str], clients: int) -> tuple[float, list[float]]:
    """Every question streamed once by `clients` clients released together,
    each asking its share one after another: the wall time until the last
    answer ended, and each answer's time to first token from its request."""
    barrier = threading.Barrier(clients + 1)
    ttfts: list[float] = []
    failures: list[BaseException] = []

    def client(i: int) -> None:
        barrier.wait()
        try:
            for query in questions[i::clients]:
                ttfts.append(stream_times(base, {"query": query, "top_k": 5})[0])
        except BaseException as exc:  # reported after the join
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join(600)
    if failures:
        raise failures[0]
    return time.perf_counter() - started, ttfts


def several_clients(args: argparse.Namespace) -> dict[str, Any]:
    """Answers per minute and time to first token with N clients at once,
    the same questions for every N."""
    own = json.loads((HERE / "own" / "documents.json").read_text())["documents"]
    kinds = {"tour": (TOUR, TOUR_QUESTIONS), "evaluation": (own, QUESTIONS)}
    out: dict[str, Any] = {"llm": args.llm, "kinds": {}}
    for kind, (docs, questions) in kinds.items():
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings.load({"data_dir": Path(tmp), "llm": args.llm}, os.environ)
            services = load_services(settings)
            app = create_app(settings, services)
            r = app.test_client().post("/upload", json={"store_mode": "text", "items": docs})
            assert r.status_code == 200, r.get_json()
            rows = []
            with serve_in_thread(app, threads=settings.http_threads) as base:
                closed_loop(base, questions[-1:], 1)  # warm: the system prompt cached
                for n in args.clients:
                    walls, ttfts = [], []
                    for _ in range(args.rounds):
                        wall, firsts = closed_loop(base, questions, n)
                        walls.append(wall)
                        ttfts += firsts
                    row = {
                        "clients": n,
                        "answers_per_min": round(60 * len(questions) / statistics.median(walls), 1),
                        "ttft_p50_s": round(statistics.median(ttfts), 3),
                        "ttft_p95_s": round(float(np.percentile(ttfts, 95)), 3),
                    }
                    rows.append(row)
                    print(kind, row, flush=True)
            services.store.close()
        out["kinds"][kind] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--llm", choices=list(PRESETS), default=DEFAULT_LLM)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clients", nargs="+", type=int, help="clients at once (see above)")
    parser.add_argument("--rounds", type=int, default=3, help="with --clients: rounds per N")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.clients:
        report = several_clients(args)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        return
    docs = json.loads((HERE / "own" / "documents.json").read_text())["documents"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # no refusal gates: every question's evidence reaches the model
        served = Settings.load({"data_dir": Path(tmp), "llm": args.llm}, os.environ)
        settings = Settings.load(
            {
                "data_dir": Path(tmp),
                "llm": args.llm,
                "answer_refusal_probability": "off",
                "answer_judge": "off",
            },
            os.environ,
        )
        services = load_services(settings)
        llm = services.llm
        assert llm is not None
        backend: Any = llm.backend
        llama = backend._llama
        app = create_app(settings, services)
        app.test_client().post("/upload", json={"store_mode": "text", "items": docs})
        with serve_in_thread(app) as base:
            # 1. passages vs latency (cache warm for the system prompt, as in service)
            rows = []
            for k in (1, 3, 5):
                ttfts, totals = [], []
                for q in QUESTIONS[: args.repeats]:
                    ttft, total = stream_times(base, {"query": q, "top_k": k, "temperature": 0})
                    ttfts.append(ttft)
                    totals.append(total)
                rows.append(
                    {
                        "passages": k,
                        "ttft_ms": round(statistics.median(ttfts) * 1000),
                        "total_ms": round(statistics.median(totals) * 1000),
                    }
                )
                print(rows[-1], flush=True)
            out["by_passages"] = rows
            # 2. stable prefix: a cleared cache vs the same system prompt again
            cold, warm = [], []
            for q in QUESTIONS[: args.repeats]:
                llama.reset()
                cold.append(stream_times(base, {"query": q, "top_k": 3, "temperature": 0})[0])
                other = QUESTIONS[(QUESTIONS.index(q) + 1) % len(QUESTIONS)]
                warm.append(stream_times(base, {"query": other, "top_k": 3, "temperature": 0})[0])
            out["prefix_cache"] = {
                "cold_ttft_ms": round(statistics.median(cold) * 1000),
                "warm_ttft_ms": round(statistics.median(warm) * 1000),
            }
            print(out["prefix_cache"], flush=True)
            # 3. server overhead vs llama-cpp-python on the same prompt
            collection = services.store.edge()
            ratios, direct_ms, server_ms = [], [], []
            for q in QUESTIONS[: args.repeats]:
                question = rag.Question(query=q, top_k=3, sampling=Sampling(temperature=0.0))
                vector = rag.query_vector(collection, question, services.embedder)
                retriever = StoredCollection(collection, vector)
                grounding = ground(llm, retriever, question, answer_config_of(app))
                assert grounding.prompt is not None
                text = backend.render(grounding.prompt.messages)
                llama.reset()
                start = time.perf_counter()
                direct = "".join(
                    c["choices"][0]["text"]
                    for c in llama.create_completion(
                        text, max_tokens=settings.max_tokens, temperature=0.0, stream=True
                    )
                )
                d = time.perf_counter() - start
                llama.reset()
                start = time.perf_counter()
                body = requests.post(
                    base + "/answer", json={"query": q, "top_k": 3, "temperature": 0}, timeout=120
                ).json()
                s = time.perf_counter() - start
                # the server may append quoted evidence to an answer that restates the question
                assert body["answer"].startswith(direct.strip()), (body["answer"], direct)
                ratios.append(s / d)
                direct_ms.append(d * 1000)
                server_ms.append(s * 1000)
            out["overhead"] = {
                "direct_ms": round(statistics.median(direct_ms)),
                "server_ms": round(statistics.median(server_ms)),
                "ratio_median": round(statistics.median(ratios), 3),
            }
            print(out["overhead"], flush=True)
        # 4. as served: the preset's gates (the same store and models)
        with serve_in_thread(create_app(served, services)) as base:
            ttfts, totals = [], []
            for q in QUESTIONS[: args.repeats]:
                ttft, total = stream_times(base, {"query": q, "top_k": 5, "temperature": 0})
                ttfts.append(ttft)
                totals.append(total)
            out["as_served"] = {
                "llm": args.llm,
                **dataclasses.asdict(served.calibration()),
                "ttft_ms": round(statistics.median(ttfts) * 1000),
                "total_ms": round(statistics.median(totals) * 1000),
            }
            print(out["as_served"], flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
