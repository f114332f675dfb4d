"""The answerability probe's dev frontier, read on test: each threshold dev
chose for a refusal target, applied as the server applies it (the probe's
probability below the threshold, or the first token's refusal probability
above the preset's refusal gate) to an ungated run that recorded both.

    .venv/bin/python benches/rag_eval.py --split test --surfaces answer --ungated \\
        --json benches/results/rag_eval_ungated_test_probe.json
    .venv/bin/python benches/probe_test_frontier.py \\
        benches/results/rag_eval_ungated_test_probe.json

Overall, and for the two sets asked in users' own words. Nothing here is
chosen: the thresholds are dev's (docs/answer-quality.md, "The dev frontier"),
read from the committed training rows when the run used the probe they make
(its settings name the threshold the probe was fitted to), else from the
tables below for the probes runs used before that was recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benches.gate_grid import outcome
from benches.probe_fit import quoted_instead
from benches.rag_eval import mentions
from flask_app.inference.presets import PRESETS

# Runs made before `probe_fitted_threshold` was recorded: (dev refusal target,
# the threshold dev's out-of-fold probabilities gave it), per preset and the
# evidence rule its probe was collected on (the run's settings say which:
# `evidence_alone_words`, absent in runs made before it)
DEV_FRONTIER = {
    ("qwen2.5-coder-0.5b", None): [  # the probe as first shipped
        (70, 0.29),
        (75, 0.37),
        (80, 0.4653),
        (85, 0.51),
        (90, 0.57),
        (92, 0.67),
        (95, 0.72),
    ],
    ("qwen2.5-coder-0.5b", 15): [  # evidence units of >= 15 words alone
        (70, 0.275),
        (75, 0.279),
        (80, 0.3168),
        (85, 0.420),
        (90, 0.474),
        (92, 0.486),
        (95, 0.600),
    ],
    ("qwen2.5-coder-1.5b", 15): [  # evidence units of >= 15 words alone
        (70, 0.200),
        (75, 0.253),
        (80, 0.304),
        (85, 0.347),
        (90, 0.445),
        (92, 0.5423),
        (95, 0.717),
    ],
    ("qwen2.5-coder-1.5b", None): [  # the probe as first shipped
        (70, 0.30),
        (75, 0.39),
        (80, 0.51),
        (85, 0.61),
        (90, 0.64),
        (92, 0.6589),
        (95, 0.69),
    ],
}
# Probes since refitted whose runs recorded `probe_fitted_threshold`: their
# dev frontier, computed exactly from the training rows committed with them
# (the run's fitted threshold, rounded to 6 digits, says which)
FITTED_BEFORE = {
    ("qwen2.5-coder-1.5b", 0.614081): [  # before its rewordings (358b4ad)
        (70, 0.24200441816037818),
        (75, 0.29521805500174686),
        (80, 0.3584370624299265),
        (85, 0.4950572350763767),
        (90, 0.6128499632069946),
        (92, 0.6140811746538174),
        (95, 0.7381336339436506),
    ],
}
OWN_WORDS = ("town-notices", "product-help")


def dev_frontier(llm: str, settings: dict[str, Any]) -> list[tuple[int, float]]:
    """(dev refusal target %, threshold) for the probe the run used."""
    fitted = settings.get("probe_fitted_threshold")
    if fitted is None:
        return DEV_FRONTIER[(llm, settings.get("evidence_alone_words"))]
    if (llm, round(fitted, 6)) in FITTED_BEFORE:
        return FITTED_BEFORE[(llm, round(fitted, 6))]
    from benches import answer_probe, probe_fit

    rows, choice, _ = answer_probe.load_training(llm)
    probe = probe_fit.fit(rows, choice)
    if not math.isclose(probe.threshold, fitted, rel_tol=1e-6):
        raise SystemExit(
            f"{llm}: the run's probe was fitted to {fitted}, the committed rows make "
            f"{probe.threshold}: its dev frontier is not known here"
        )
    points = answer_probe.dev_frontier(rows, probe)
    return [
        (round(target * 100), point.threshold)
        for target, point in zip(answer_probe.DEV_TARGETS, points, strict=True)
    ]


def quoted(row: dict[str, Any]) -> dict[str, Any]:
    """The row answered with its recorded evidence line instead of the
    model's answer (declined when there is none): right for an answerable
    question when the line holds the fact, a decline only without a line."""
    line = row["quote"]
    if row["expected"] is None:
        return {**row, "correct": line is None}
    return {**row, "correct": line is not None and mentions(line, row["expected"])}


def served(
    rows: list[dict[str, Any]],
    threshold: float,
    refusal: float,
    quotes: bool = False,
    yes_no: bool = False,
) -> str:
    """'refusals / correct' of `rows` gated as served at `threshold`: below
    it declined; above it, a first token past the refusal gate is declined,
    or with `quotes` answered with the row's evidence line, as is every
    yes-or-no question with `yes_no`."""
    cut = []
    for r in rows:
        passes = r["answerable_probability"] >= threshold
        refusing = (r["refusal_probability"] or 0.0) > refusal
        if passes and quoted_instead(r, refusal, quotes, yes_no):
            cut.append({**quoted(r), "refusal_probability": 0.0})
        else:
            cut.append({**r, "refusal_probability": 1.0 if not passes or refusing else 0.0})
    o = outcome(cut, 0.5, 0.0)

    def share(part: int, whole: int) -> str:
        return f"{part / whole:.0%}" if whole else "–"

    return f"{share(o.refused, o.unanswerable)} / {share(o.answered, o.answerable)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="an --ungated benches/rag_eval.py run on test")
    args = parser.parse_args()
    run = json.loads(args.run.read_text())
    answers = run["answers"]
    print(
        "| dev target | model | threshold | test: refused / correct | town-notices | product-help |"
    )
    print("|---|---|---|---|---|---|")
    for llm, settings in run["settings"].items():
        points = dev_frontier(llm, settings)
        rows = [
            r
            for r in answers
            if r["llm"] == llm and r["surface"] == "answer" and r["split"] == "test"
        ]
        if not rows:
            continue
        quotes = bool(settings.get("quote_refusals"))
        yes_no = bool(settings.get("quote_yes_no"))
        if (quotes or yes_no) and any("quote" not in r for r in rows):
            raise SystemExit(
                f"{llm}: the run's probe quotes the answers it lets through, and this run "
                "did not record the lines it would quote (a run made before `--ungated` "
                "recorded them)"
            )
        refusal = PRESETS[llm].calibration.refusal_probability
        for target, threshold in points:
            parts = [served(rows, threshold, refusal, quotes, yes_no)]
            parts += [
                served([r for r in rows if r["set"] == s], threshold, refusal, quotes, yes_no)
                for s in OWN_WORDS
            ]
            print(f"| {target}% | {llm} | {threshold:.4g} | " + " | ".join(parts) + " |")


if __name__ == "__main__":
    main()
