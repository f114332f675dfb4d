"""What an answer's prompt is made of, in tokens, and what each part costs
in time to first token.

For dev questions of the tuned sets, each preset builds the prompt `/answer`
builds (hybrid retrieval, evidence units, the preset's prompt) and counts its
parts with the model's own tokenizer: the system prompt (llama.cpp keeps it
cached, so after the first answer it costs nothing), the best evidence unit
of each block, the rest of each block (the neighbours shown for context, and
any other chosen unit next to the best one), the question, and the rest (the
`Document N:` labels and the chat template). Then it reads each
prompt with only the system prompt cached and one token drawn, and shares
each read's time among the parts it read by their tokens: what each part
costs per answer.

    .venv/bin/python benches/prompt_cost.py --json benches/results/prompt_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benches import eval_sets
from benches.rag_eval import grounded, upload_items
from flask_app.api.http.extensions import answer_config_of
from flask_app.app import create_app
from flask_app.inference.llm import ChatMessage, LlamaBackend, Sampling
from flask_app.rag.answer import Grounding
from flask_app.services import load_services
from flask_app.settings import Settings

PARTS = ("system", "units", "neighbours", "question", "rest")


def prompt_parts(
    count: Callable[[str], int],
    render: Callable[[Sequence[ChatMessage]], str],
    grounding: Grounding,
    query: str,
) -> dict[str, int]:
    """Tokens of each part of one grounded prompt, counted by `count` (the
    rest: whatever the whole prompt holds beyond the counted parts)."""
    assert grounding.prompt is not None
    messages = grounding.prompt.messages
    whole = count(render(messages))
    system = count(render(messages[:1]))
    units = neighbours = 0
    for piece in grounding.pieces:
        focus = piece.text[piece.focus_start - piece.start : piece.focus_end - piece.start]
        in_piece = count(piece.text.strip())
        in_focus = min(in_piece, count(focus.strip()))
        units += in_focus
        neighbours += in_piece - in_focus
    question = count(f"Question: {query.strip()}")
    return {
        "system": system,
        "units": units,
        "neighbours": neighbours,
        "question": question,
        "rest": whole - system - units - neighbours - question,
        "whole": whole,
    }


def read_time(backend: LlamaBackend, system_only: str, prompt: str) -> tuple[float, int]:
    """Seconds to read `prompt` and draw one token with only the system prompt
    cached, and how many tokens were read."""
    from llama_cpp import Llama

    greedy = Sampling(temperature=0.0)
    list(backend.generate(system_only, max_tokens=1, sampling=greedy, probe=None))
    prompt_ids = backend.tokens(prompt)
    read = len(prompt_ids) - Llama.longest_token_prefix(prompt_ids, backend.tokens(system_only))
    started = time.perf_counter()
    list(backend.generate(prompt, max_tokens=1, sampling=greedy, probe=None))
    return time.perf_counter() - started, read


def run_preset(llm: str, sets: list[str], per_set: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "llm": llm}, os.environ)
        services = load_services(settings)
        app = create_app(settings, services)
        client = app.test_client()
        assert services.llm is not None and isinstance(services.llm.backend, LlamaBackend)
        assert services.embedder is not None
        backend = services.llm.backend
        with app.app_context():
            config = answer_config_of(app)
        for name in sets:
            evset = eval_sets.load(name)
            items = evset.passages()
            upload_items(client, items)
            dev = [q for q in evset.questions if q["split"] == "dev"][:per_set]
            for q in dev:
                _, grounding = grounded(services, config, q["q"])
                assert grounding.prompt is not None
                parts = prompt_parts(backend.count_tokens, backend.render, grounding, q["q"])
                messages = grounding.prompt.messages
                system_only = backend.render([messages[0], {"role": "user", "content": "Hi"}])
                seconds, read = read_time(backend, system_only, backend.render(messages))
                rows.append({"set": name, "question": q["q"], **parts, "read": read, "s": seconds})
            services.store.edge().delete([it["id"] for it in items])
        services.store.close()
    return summary(llm, rows)


def summary(llm: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean tokens of each part, and each part's share of the measured read time."""
    read_parts = [p for p in PARTS if p != "system"]
    mean = {p: statistics.fmean(r[p] for r in rows) for p in (*PARTS, "whole", "read")}
    seconds = [r["s"] for r in rows]
    cost = {
        p: statistics.fmean(1000 * r["s"] * r[p] / sum(r[q] for q in read_parts) for r in rows)
        for p in read_parts
    }
    return {
        "llm": llm,
        "questions": len(rows),
        "mean_tokens": {k: round(v, 1) for k, v in mean.items()},
        "ms_per_token": round(1000 * statistics.fmean(seconds) / mean["read"], 2),
        "read_ms_p50": round(1000 * statistics.median(seconds), 1),
        "read_ms_mean": round(1000 * statistics.fmean(seconds), 1),
        "ms_per_answer": {p: round(v, 1) for p, v in cost.items()},
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llms", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    parser.add_argument("--sets", nargs="+", default=eval_sets.TUNED)
    parser.add_argument("--per-set", type=int, default=8, help="dev questions per set")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    for llm in args.llms:
        result = run_preset(llm, args.sets, args.per_set)
        results.append(result)
        t = result["mean_tokens"]
        c = result["ms_per_answer"]
        print(
            f"{llm}: {result['questions']} prompts, {t['whole']:.0f} tokens "
            f"(system {t['system']:.0f} cached, units {t['units']:.0f}, neighbours "
            f"{t['neighbours']:.0f}, question {t['question']:.0f}, rest {t['rest']:.0f}); "
            f"{result['ms_per_token']:.2f} ms a token; "
            f"per answer units {c['units']:.0f} ms, "
            f"neighbours {c['neighbours']:.0f} ms, question {c['question']:.0f} ms, "
            f"rest {c['rest']:.0f} ms; "
            f"read p50 {result['read_ms_p50']:.0f} ms",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps({"results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
