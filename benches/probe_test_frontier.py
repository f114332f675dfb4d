"""The answerability probe's dev frontier, read on test: each threshold dev
chose for a refusal target, applied as the server applies it (the probe's
probability below the threshold, or the first token's refusal probability
above the preset's refusal gate) to an ungated run that recorded both.

    .venv/bin/python benches/rag_eval.py --split test --surfaces answer --ungated \\
        --json benches/results/rag_eval_ungated_test_probe.json
    .venv/bin/python benches/probe_test_frontier.py \\
        benches/results/rag_eval_ungated_test_probe.json

Overall, and for the two sets asked in users' own words. Nothing here is
chosen: the thresholds are dev's, from the committed training rows
(docs/answer-quality.md, "The dev frontier").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benches import answer_probe, probe_fit
from benches.gate_grid import outcome
from flask_app.inference.presets import PRESETS


def dev_frontier(llm: str) -> list[tuple[int, float]]:
    """(dev refusal target in %, the threshold dev's out-of-fold
    probabilities give it), read from the committed training rows."""
    rows, choice, _ = answer_probe.load_training(llm)
    fitted = probe_fit.fit(rows, choice)
    return [
        (round(t * 100), round(probe_fit.threshold_for(rows, fitted.oof, t).threshold, 4))
        for t in answer_probe.DEV_TARGETS
    ]


OWN_WORDS = ("town-notices", "product-help")


def served(rows: list[dict[str, Any]], threshold: float, refusal: float) -> str:
    """'refusals / correct' of `rows` gated as served at `threshold`."""
    cut = [
        {
            **r,
            "refusal_probability": 1.0
            if r["answerable_probability"] < threshold
            or (r["refusal_probability"] or 0.0) > refusal
            else 0.0,
        }
        for r in rows
    ]
    o = outcome(cut, 0.5, 0.0)
    return f"{o.refused / o.unanswerable:.0%} / {o.answered / o.answerable:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="an --ungated benches/rag_eval.py run on test")
    args = parser.parse_args()
    answers = json.loads(args.run.read_text())["answers"]
    print(
        "| dev target | model | threshold | test: refused / correct | town-notices | product-help |"
    )
    print("|---|---|---|---|---|---|")
    for llm in PRESETS:
        rows = [
            r
            for r in answers
            if r["llm"] == llm and r["surface"] == "answer" and r["split"] == "test"
        ]
        if not rows:
            continue
        refusal = PRESETS[llm].calibration.refusal_probability
        for target, threshold in dev_frontier(llm):
            parts = [served(rows, threshold, refusal)]
            parts += [
                served([r for r in rows if r["set"] == s], threshold, refusal) for s in OWN_WORDS
            ]
            print(f"| {target}% | {llm} | {threshold} | " + " | ".join(parts) + " |")


if __name__ == "__main__":
    main()
