"""Every pair of refusal-gate thresholds scored from one ungated run.

The two gates only cut an answer short (the evidence gate before the model,
the refusal gate at its first token), and the seeded sampler repeats the
rest, so a run with both off records everything needed to score any pair:

    EDGERAG_ANSWER_MIN_EVIDENCE=0 EDGERAG_ANSWER_REFUSAL_PROBABILITY=1 \\
        .venv/bin/python benches/rag_eval.py --split dev --surfaces answer \\
        --json benches/results/rag_eval_dev_ungated.json
    .venv/bin/python benches/gate_grid.py benches/results/rag_eval_dev_ungated.json

Prints the given pair's numbers (default: the server's), the best pairs of
the grid by the mean over sets of (accuracy + correct refusals) / 2, how
well the two signals separate unanswerable from answerable questions (AUC),
and the frontier: the most refusals any pair gives at each accuracy. The
grid is fitted on the run it scores, so its best pair is optimistic.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask_app.settings import Settings

EVIDENCE = [round(0.05 * i, 2) for i in range(17)]  # 0 … 0.8
RATIOS = [0.02, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 100.0]


@dataclass(frozen=True)
class Outcome:
    min_evidence: float
    ratio: float
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


def gated(row: dict[str, Any], min_evidence: float, ratio: float) -> bool:
    """The answer the gates would have replaced by the refusal."""
    evidence = row["evidence_score"] or 0.0
    probability = row["refusal_probability"] or 0.0
    return evidence < min_evidence or probability > ratio * evidence


def outcome(rows: list[dict[str, Any]], min_evidence: float, ratio: float) -> Outcome:
    per_set: dict[str, list[int]] = {}
    for row in rows:
        cut = gated(row, min_evidence, ratio)
        counts = per_set.setdefault(row["set"], [0, 0, 0, 0])
        if row["expected"] is not None:
            counts[0] += bool(row["correct"]) and not cut
            counts[1] += 1
        else:
            counts[2] += cut or bool(row["correct"])  # declined by the gate or by the model
            counts[3] += 1
    means = [((a / n if n else 0.0) + (r / m if m else 0.0)) / 2 for a, n, r, m in per_set.values()]
    totals = [sum(c[i] for c in per_set.values()) for i in range(4)]
    return Outcome(
        min_evidence,
        ratio,
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


def refusal_signal(row: dict[str, Any]) -> float:
    """How strongly the two signals point at declining: what the refusal gate
    compares with its ratio."""
    return (row["refusal_probability"] or 0.0) / max(row["evidence_score"] or 0.0, 1e-3)


def frontier(outcomes: list[Outcome]) -> list[Outcome]:
    """The pairs no other pair beats on both accuracy and refusals, by accuracy."""
    best: list[Outcome] = []
    for o in sorted(outcomes, key=lambda o: (-o.accuracy, -o.refusals)):
        if not best or o.refusals > best[-1].refusals:
            best.append(o)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", type=Path, help="results of an ungated benches/rag_eval.py run")
    defaults = Settings()
    parser.add_argument("--min-evidence", type=float, default=defaults.answer_min_evidence)
    parser.add_argument("--ratio", type=float, default=defaults.answer_refusal_probability)
    args = parser.parse_args()
    report = json.loads(args.run.read_text())
    settings = report.get("settings", {})
    if (
        settings.get("answer_min_evidence", 0) > 0
        or settings.get("answer_refusal_probability", 1) < 1
    ):
        parser.error(f"{args.run}: the run was gated ({settings}); score an ungated run")
    rows = [r for r in report["answers"] if r["surface"] == "answer"]
    grid = [outcome(rows, e, r) for e in EVIDENCE for r in RATIOS]

    def line(o: Outcome) -> str:
        return (
            f"evidence {o.min_evidence:<4} refusal {o.ratio:<5} × evidence: "
            f"accuracy {o.answered}/{o.answerable} ({o.accuracy:.0%}), "
            f"refusals {o.refused}/{o.unanswerable} ({o.refusals:.0%}), "
            f"mean over sets {o.mean_over_sets:.3f}"
        )

    print("given:", line(outcome(rows, args.min_evidence, args.ratio)))
    print("best of the grid (fitted on this run):")
    for o in sorted(grid, key=lambda o: -o.mean_over_sets)[:3]:
        print("  ", line(o))
    unanswerable = [refusal_signal(r) for r in rows if r["expected"] is None]
    answerable = [refusal_signal(r) for r in rows if r["expected"] is not None]
    evidence_auc = auc(
        [-(r["evidence_score"] or 0.0) for r in rows if r["expected"] is None],
        [-(r["evidence_score"] or 0.0) for r in rows if r["expected"] is not None],
    )
    print(
        f"AUC unanswerable vs answerable: refusal probability ÷ evidence "
        f"{auc(unanswerable, answerable):.3f}, evidence alone {evidence_auc:.3f}"
    )
    print("frontier (the most refusals at each accuracy):")
    for o in frontier(grid):
        print("  ", line(o))


if __name__ == "__main__":
    main()
