"""Every pair of answer-gate thresholds scored from one ungated run, per model.

The two gates only cut an answer short at its first token (the judge's
P(yes) below its threshold, or the first token's refusal probability above
the ratio × the evidence score), and the seeded sampler repeats the rest, so
a run that records both signals without acting on them scores any pair:

    .venv/bin/python benches/rag_eval.py --split dev --surfaces answer --ungated \\
        --json benches/results/rag_eval_dev_ungated.json
    .venv/bin/python benches/gate_grid.py benches/results/rag_eval_dev_ungated.json

For each model of the run: the preset's calibrated pair, the best pairs of
the grid by the mean over sets of (accuracy + correct refusals) / 2, how
well each signal separates unanswerable from answerable questions (AUC),
and the frontier: the most refusals any pair gives at each accuracy. The
grid is fitted on the run it scores, so its best pair is optimistic.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask_app.inference.presets import PRESETS

RATIOS = [0.02, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 100.0]
JUDGES = [0.0, 0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8]


@dataclass(frozen=True)
class Outcome:
    ratio: float
    judge: float
    answered: int  # answerable questions answered correctly
    answerable: int
    refused: int  # unanswerable questions declined
    unanswerable: int
    mean_over_sets: float

    @property
    def accuracy(self) -> float:
        return self.answered / self.answerable if self.answerable else 0.0

    @property
    def refusals(self) -> float:
        return self.refused / self.unanswerable if self.unanswerable else 0.0


def gated(row: dict[str, Any], ratio: float, judge: float) -> bool:
    """The answer the gates would have replaced by the refusal."""
    answerable = row.get("answerable_probability")
    if judge > 0 and answerable is not None and answerable < judge:
        return True
    evidence = row["evidence_score"] or 0.0
    return (row["refusal_probability"] or 0.0) > ratio * evidence


def outcome(rows: list[dict[str, Any]], ratio: float, judge: float) -> Outcome:
    per_set: dict[str, list[int]] = {}
    for row in rows:
        cut = gated(row, ratio, judge)
        counts = per_set.setdefault(row["set"], [0, 0, 0, 0])
        if row["expected"] is not None:
            counts[0] += bool(row["correct"]) and not cut
            counts[1] += 1
        else:
            counts[2] += cut or bool(row["correct"])  # declined by a gate or by the model
            counts[3] += 1
    means = [((a / n if n else 0.0) + (r / m if m else 0.0)) / 2 for a, n, r, m in per_set.values()]
    totals = [sum(c[i] for c in per_set.values()) for i in range(4)]
    return Outcome(
        ratio,
        judge,
        answered=totals[0],
        answerable=totals[1],
        refused=totals[2],
        unanswerable=totals[3],
        mean_over_sets=sum(means) / len(means) if means else 0.0,
    )


def auc(positives: list[float], negatives: list[float]) -> float:
    """P(a random positive scores above a random negative), ties counting half."""
    pairs = [(p > n) + 0.5 * (p == n) for p in positives for n in negatives]
    return sum(pairs) / len(pairs) if pairs else 0.5


def frontier(outcomes: list[Outcome]) -> list[Outcome]:
    """The pairs no other pair beats on both accuracy and refusals, by accuracy."""
    best: list[Outcome] = []
    for o in sorted(outcomes, key=lambda o: (-o.accuracy, -o.refusals)):
        if not best or o.refusals > best[-1].refusals:
            best.append(o)
    return best


def separation(rows: list[dict[str, Any]]) -> dict[str, float]:
    """AUC of each signal for telling unanswerable from answerable questions
    (higher: the signal points at declining more for the unanswerable)."""

    def refusal(r: dict[str, Any]) -> float:
        return float(r["refusal_probability"] or 0.0) / max(r["evidence_score"] or 0.0, 1e-3)

    def weak_evidence(r: dict[str, Any]) -> float:
        return -float(r["evidence_score"] or 0.0)

    def judge_no(r: dict[str, Any]) -> float:
        return 1.0 - float(r["answerable_probability"])

    signals: dict[str, Callable[[dict[str, Any]], float]] = {
        "refusal probability ÷ evidence": refusal,
        "evidence score (lower)": weak_evidence,
    }
    if all(r.get("answerable_probability") is not None for r in rows):
        signals["judge P(no)"] = judge_no
    out = {}
    for name, signal in signals.items():
        out[name] = auc(
            [signal(r) for r in rows if r["expected"] is None],
            [signal(r) for r in rows if r["expected"] is not None],
        )
    return out


def line(o: Outcome) -> str:
    return (
        f"judge < {o.judge:<4} or refusal > {o.ratio:<5} × evidence: "
        f"accuracy {o.answered}/{o.answerable} ({o.accuracy:.0%}), "
        f"refusals {o.refused}/{o.unanswerable} ({o.refusals:.0%}), "
        f"mean over sets {o.mean_over_sets:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", type=Path, help="results of a benches/rag_eval.py --ungated run")
    args = parser.parse_args()
    report = json.loads(args.run.read_text())
    rows = [r for r in report["answers"] if r["surface"] == "answer"]
    for llm in dict.fromkeys(r["llm"] for r in rows):
        settings = report["settings"][llm]
        if settings.get("refusal_probability", 1) < 1 or settings.get("judge", 0) > 0.01:
            parser.error(f"{args.run}: {llm} was gated ({settings}); score an --ungated run")
        mine = [r for r in rows if r["llm"] == llm]
        judged = all(r.get("answerable_probability") is not None for r in mine)
        grid = [outcome(mine, r, j) for r in RATIOS for j in (JUDGES if judged else [0.0])]
        calibration = PRESETS[llm].calibration
        print(f"== {llm}")
        given = outcome(mine, calibration.refusal_probability, calibration.judge)
        print("calibrated:", line(given))
        print("best of the grid (fitted on this run):")
        for o in sorted(grid, key=lambda o: -o.mean_over_sets)[:3]:
            print("  ", line(o))
        aucs = ", ".join(f"{name} {value:.3f}" for name, value in separation(mine).items())
        print(f"AUC unanswerable vs answerable: {aucs}")
        print("frontier (the most refusals at each accuracy):")
        for o in frontier(grid):
            print("  ", line(o))


if __name__ == "__main__":
    main()
