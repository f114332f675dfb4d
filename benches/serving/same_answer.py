"""The same question, the same answer? Each kind's questions (the README
tour's, the evaluation's) asked one after another on one server: in order,
in reverse, in order again; then on a second, fresh server in reverse.
Counts the answers (text, the verifier's probability, the first step's
refusal probability) that differ from the first time the question was
asked, and the time the server spent reading each prompt, first asked
and asked again.

    .venv/bin/python benches/serving/same_answer.py [--llm NAME] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import requests

from benches.serving.answer_latency import kinds, median, server
from flask_app.inference.presets import DEFAULT_LLM, PRESETS

Key = tuple[str, float | None, float | None]


def asked(base: str, query: str) -> tuple[Key, float]:
    r = requests.post(base + "/answer", json={"query": query, "top_k": 5}, timeout=(5, 300))
    r.raise_for_status()
    body = r.json()
    key = (body["answer"], body.get("answerable_probability"), body.get("refusal_probability"))
    return key, float(body["timing"]["prefill_s"])


def one_kind(llm: str, docs: list[dict[str, Any]], questions: list[str]) -> dict[str, Any]:
    first: dict[str, Key] = {}
    read_first: list[float] = []
    read_again: list[float] = []
    differ: list[dict[str, Any]] = []
    with server(llm, docs) as base:
        for query in [*questions, *questions[::-1], *questions]:
            key, prefill = asked(base, query)
            if query not in first:
                first[query] = key
                read_first.append(prefill)
                continue
            read_again.append(prefill)
            if key != first[query]:
                differ.append({"question": query, "first": first[query], "again": key})
    fresh_differ = []
    with server(llm, docs) as base:
        for query in questions[::-1]:
            key, _ = asked(base, query)
            if key != first[query]:
                fresh_differ.append({"question": query, "first": first[query], "fresh": key})
    return {
        "asked_again": 2 * len(questions),
        "differ_asked_again": len(differ),
        "answers_differ_asked_again": sum(d["first"][0] != d["again"][0] for d in differ),
        "differ_on_a_fresh_server": len(fresh_differ),
        "prefill_first_asked_s": median(read_first),
        "prefill_asked_again_s": median(read_again),
        "examples": (differ + fresh_differ)[:6],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", default=DEFAULT_LLM, choices=sorted(PRESETS))
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = {}
    for name, (docs, questions) in kinds().items():
        results[name] = row = one_kind(args.llm, docs, questions)
        print(
            f"{name}: {row['differ_asked_again']} of {row['asked_again']} asked again differ "
            f"({row['answers_differ_asked_again']} in their text), "
            f"{row['differ_on_a_fresh_server']} of {len(questions)} on a fresh server; "
            f"prompt read in {row['prefill_first_asked_s']} s first asked, "
            f"{row['prefill_asked_again_s']} s asked again (medians)",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"llm": args.llm, **results}, f, indent=1)


if __name__ == "__main__":
    main()
