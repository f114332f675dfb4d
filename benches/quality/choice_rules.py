"""How the shipped verifier's choice among candidates is made, measured on
the dev rows (never test): whether the question's own words count as an
answer, and how much likelier than the greedy answer a sampled one must be
to be chosen instead.

    .venv/bin/python -m benches.quality.choice_rules --llm qwen2.5-coder-0.5b

Rows are those of `benches.quality.candidates` (CACHE/verifier/<preset>/
{squad,sets}/dev). Each question is served as the server serves it: the
greedy answer alone when it is an answer and reaches `accept`, else it and
the verifier's `samples` sampled ones; the chosen one is declined below the
file's threshold. The answer's state is read where the server reads it:
after `candidate_tokens` tokens, or at the answer's end when shorter.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benches.quality.candidates import LAYERS, cache_dir
from flask_app.rag.choice import restates
from flask_app.rag.prompts import is_refusal
from flask_app.rag.verifier import Verifier, verifier_path

MARGINS = (0.0, 0.02, 0.05, 0.08, 0.12, 1.0)


@dataclass(frozen=True)
class Asked:
    query: str
    answerable: bool
    candidates: list[tuple[str, bool, float]]  # text, right, P(right)


def questions(llm: str, family: str, verifier: Verifier) -> Iterator[Asked]:
    probe = verifier.correct
    if probe is None or probe.reads != "last":
        raise SystemExit(f"{llm}: its verifier does not read the answer's last token")
    at = LAYERS[llm].index(probe.layer)
    for folder in sorted((cache_dir() / llm / family / "dev").glob("*/")):
        rows = [json.loads(line) for line in (folder / "rows.jsonl").open()]
        states = np.load(folder / "states.npz")
        paused = states[f"at{verifier.candidate_tokens}"]
        for i, row in enumerate(rows):
            scored = []
            for k, cand in enumerate(row["candidates"][: 1 + verifier.samples]):
                long = cand["tokens"] > verifier.candidate_tokens
                state = (paused if long else states["last"])[i, k, at].astype(np.float32)
                text = cand["text"].strip()
                p = verifier.probability(state, text, [], cand["logprobs"], None)
                scored.append((text, cand["grade"] == "right", p))
            yield Asked(row["query"], bool(row["expected"]), scored)


def served(
    asked: list[Asked], verifier: Verifier, margin: float, own_words_answer: bool
) -> tuple[float, float, float]:
    """(right, wrong) shares of the answerable questions, declined share of the others."""
    right = wrong = declined = answerable = 0
    for q in asked:

        def is_answer(text: str, query: str = q.query) -> bool:
            if not text or is_refusal(text):
                return False
            return own_words_answer or not restates(text, query)

        greedy = q.candidates[0]
        sure = verifier.accept is not None and greedy[2] >= verifier.accept
        pool = [greedy] if is_answer(greedy[0]) and sure else q.candidates
        answers = [c for c in pool if is_answer(c[0])]
        best = max(answers, key=lambda c: c[2], default=None)
        if best is not None and answers[0] is greedy and best[2] - greedy[2] <= margin:
            best = greedy
        answered = best is not None and best[2] >= verifier.threshold
        if q.answerable:
            answerable += 1
            right += answered and best is not None and best[1]
            wrong += answered and best is not None and not best[1]
        else:
            declined += not answered
    others = len(asked) - answerable
    return right / max(1, answerable), wrong / max(1, answerable), declined / max(1, others)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--verifier", type=Path, help="default: the shipped file")
    args = parser.parse_args(argv)
    verifier = Verifier.read(args.verifier or verifier_path(args.llm))
    for family in ("squad", "sets"):
        asked = list(questions(args.llm, family, verifier))
        print(f"{family} dev: {len(asked)} questions")
        for own_words in (True, False):
            for margin in MARGINS:
                right, wrong, declined = served(asked, verifier, margin, own_words)
                print(
                    f"  own words an answer {own_words!s:5}  margin {margin:4.2f}: "
                    f"{right:.1%} right / {wrong:.1%} wrong / {declined:.1%} declined"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
