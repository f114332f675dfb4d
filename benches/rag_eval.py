"""Answer-quality evaluation of /answer/stream with the real default models.

    .venv/bin/python benches/rag_eval.py [--top-k 5] [--json benches/results/rag_eval.json]

Uploads benches/eval/documents.json (38 passages: dates, numbers, names, near
duplicates, distractors) into a fresh store, asks every question of
benches/eval/questions.json through the HTTP app (SSE) and reports:
- accuracy on answerable questions: the expected fact appears in the answer;
- correct-refusal rate on unanswerable ones: the answer declines;
- time to first token and generation tokens/s.
Settings come from EDGERAG_* variables as for the server (e.g. EDGERAG_QUANT).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from flask_app.app import create_app
from flask_app.services import load_services
from flask_app.settings import Settings

HERE = Path(__file__).parent / "eval"
REFUSAL = re.compile(
    r"(do not|don't|does not|doesn't|cannot|can't) (have|provide|contain|find|answer)"
    r"|not enough information|no information|not (mentioned|provided|specified|stated|given)"
    r"|unknown|i don't know|not available",
    re.IGNORECASE,
)


def parse_sse(chunks: Any) -> Any:
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while b"\n\n" in buffer:
            raw, buffer = buffer.split(b"\n\n", 1)
            lines = raw.decode().split("\n")
            event = next(line[7:] for line in lines if line.startswith("event: "))
            data = json.loads("\n".join(line[6:] for line in lines if line.startswith("data: ")))
            yield event, data


def is_refusal(answer: str) -> bool:
    return bool(REFUSAL.search(answer.replace("\u2019", "'")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write every answer and the summary here")
    parser.add_argument("--header-prompt", help="send this system prompt instead of the default")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args()
    documents = json.loads((HERE / "documents.json").read_text())["documents"]
    questions = json.loads((HERE / "questions.json").read_text())["questions"]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp)}, os.environ)
        services = load_services(settings)
        assert services.llm is not None
        client = create_app(settings, services).test_client()
        r = client.post("/upload", json={"store_mode": "text", "items": documents})
        assert r.status_code == 200, r.get_json()
        rows = []
        for n, item in enumerate(questions, 1):
            start = time.perf_counter()
            payload = {"query": item["q"], "top_k": args.top_k, "temperature": 0.0}
            if args.header_prompt:
                payload["header_prompt"] = args.header_prompt
            response = client.post("/answer/stream", json=payload, buffered=False)
            first = None
            events = 0
            answer, context_count = "", 0
            for event, data in parse_sse(response.response):
                if event == "meta":
                    context_count = data["context_count"]
                elif event == "token":
                    events += 1
                    if first is None:
                        first = time.perf_counter()
                elif event == "done":
                    answer = data["answer"]
                elif event == "error":
                    raise SystemExit(f"error event: {data}")
            end = time.perf_counter()
            tokens = services.llm.count_tokens(answer)
            expected = item["expect"]
            normalised = answer.lower().replace("\u2019", "'")
            if expected is None:
                correct = is_refusal(answer)
            else:
                correct = any(e in normalised for e in expected) and not is_refusal(answer)
            row = {
                "question": item["q"],
                "expected": expected,
                "answer": answer,
                "correct": correct,
                "context_count": context_count,
                "ttft_s": round((first or end) - start, 3),
                "total_s": round(end - start, 3),
                "completion_tokens": tokens,
                # streamed deltas after the first, per second (None for one-piece answers)
                "tokens_per_s": round((events - 1) / (end - first), 1)
                if first and events > 2 and end > first
                else None,
            }
            rows.append(row)
            mark = "ok " if correct else "BAD"
            if not args.quiet or not correct:
                print(
                    f"{n:2d} {mark} {row['ttft_s']:5.2f}s  {item['q']}\n        -> {answer}",
                    flush=True,
                )
    answerable = [r for r in rows if r["expected"] is not None]
    unanswerable = [r for r in rows if r["expected"] is None]
    rates = [r["tokens_per_s"] for r in rows if r["tokens_per_s"]]
    summary = {
        "model": services.llm.model_id,
        "top_k": args.top_k,
        "context_tokens": settings.context_tokens,
        "accuracy": round(sum(r["correct"] for r in answerable) / len(answerable), 3),
        "answerable": len(answerable),
        "correct_refusals": round(sum(r["correct"] for r in unanswerable) / len(unanswerable), 3),
        "unanswerable": len(unanswerable),
        "ttft_mean_s": round(statistics.mean(r["ttft_s"] for r in rows), 3),
        "ttft_median_s": round(statistics.median(r["ttft_s"] for r in rows), 3),
        "tokens_per_s_mean": round(statistics.mean(rates), 1) if rates else None,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": summary, "answers": rows}, indent=2))


if __name__ == "__main__":
    main()
