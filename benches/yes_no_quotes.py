"""What the closest-line quotes of declined yes-or-no questions change in a
`benches/rag_eval.py` run: its accuracy and honest refusals as run, and with
each quote read as the refusal it replaced (one quote replaces exactly one
refusal, so that is the run without them), per model, with every quote.

    .venv/bin/python benches/yes_no_quotes.py benches/results/rag_eval_yes_no_plain_quote_dev.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# the two wordings the runs hold: plain (an answer) and said not to be a verdict;
# the plain one is also how an empty answer's quote starts (none in these runs)
QUOTES = ('The documents say: "', "The documents do not answer this directly; ")


def summary(answers: list[dict[str, Any]]) -> list[str]:
    lines = []
    for llm in sorted({a["llm"] for a in answers}):
        rows = [a for a in answers if a["llm"] == llm and a["surface"] == "answer"]
        answerable = [a for a in rows if a["expected"]]
        unanswerable = [a for a in rows if not a["expected"]]
        quoted = [a for a in rows if a["answer"].startswith(QUOTES)]
        correct = sum(a["correct"] for a in answerable)
        refused = sum(a["correct"] for a in unanswerable)
        lost = sum(a["correct"] for a in quoted if a["expected"])
        gained = sum(not a["correct"] for a in quoted if not a["expected"])
        n, m = len(answerable), len(unanswerable)
        lines.append(f"{llm}: {n} answerable, {m} unanswerable, {len(quoted)} quotes")
        lines.append(f"  as run:             correct {correct / n:.0%}, refusals {refused / m:.0%}")
        lines.append(
            f"  quotes as refusals: correct {(correct - lost) / n:.0%}, "
            f"refusals {(refused + gained) / m:.0%}"
        )
        for a in quoted:
            kind = "answerable" if a["expected"] else "unanswerable"
            mark = "fact" if a["correct"] and a["expected"] else "    "
            lines.append(f"  {kind:12} {mark} {a['question']} -> {a['answer']}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a rag_eval.py --json file")
    args = parser.parse_args()
    print("\n".join(summary(json.loads(args.run.read_text())["answers"])))


if __name__ == "__main__":
    main()
