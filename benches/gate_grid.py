"""Every pair of answer-gate thresholds scored from one ungated run, per model.

The two gates only cut an answer short at its first token (the judge's
P(yes) below its threshold, or the first token's refusal probability above
its threshold), and the seeded sampler repeats the rest, so
a run that records both signals without acting on them scores any pair:

    .venv/bin/python benches/rag_eval.py --split dev --surfaces answer --ungated \\
        --json benches/results/rag_eval_ungated.json
    .venv/bin/python benches/gate_grid.py benches/results/rag_eval_ungated.json

`--gated-json OUT` also writes the run as the presets' calibrated gates would
have answered it (a cut answer becomes the fixed sentence, its total time its
first token's), for `benches/rag_eval.py --rescore --json OUT` to tabulate.

For each model of the run: the preset's calibrated pair, the best pairs of
the grid by the mean over sets of (accuracy + correct refusals) / 2, the
pair the calibration rule picks (the best mean over sets among the pairs that
give up at most `ACCURACY_GIVEN` of the ungated accuracy: a gate may refuse
an invented answer, not trade away answers people came for), how well each
signal separates unanswerable from answerable questions (AUC), and the
frontier: the most refusals any pair gives at each accuracy. The grid is
fitted on the run it scores, so run it on dev and report test.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benches import eval_sets
from flask_app.inference.presets import PRESETS
from flask_app.rag.prompts import NO_CONTEXT_ANSWER

REFUSALS = [0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0]
JUDGES = [0.0, 0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8]
ACCURACY_GIVEN = 0.02


@dataclass(frozen=True)
class Outcome:
    refusal: float
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


PROBE_THRESHOLDS = [round(0.05 * i, 2) for i in range(1, 20)]


def probe_outcomes(rows: list[dict[str, Any]]) -> list[tuple[float, Outcome]]:
    """Each probe threshold's outcome on a run whose rows carry the probe's
    probability (`answerable_probability`, the probe recording, declining nothing)."""
    out = []
    for threshold in PROBE_THRESHOLDS:
        cut = [
            {**r, "refusal_probability": 1.0 if r["answerable_probability"] < threshold else 0.0}
            for r in rows
        ]
        out.append((threshold, outcome(cut, 0.5, 0.0)))
    return out


def gated(row: dict[str, Any], refusal: float, judge: float) -> bool:
    """The answer the gates would have replaced by the refusal."""
    answerable = row.get("answerable_probability")
    if judge > 0 and answerable is not None and answerable < judge:
        return True
    return (row["refusal_probability"] or 0.0) > refusal


def apply_gates(rows: list[dict[str, Any]], refusal: float, judge: float) -> list[dict[str, Any]]:
    """The rows as the gates would have answered them."""
    out = []
    for row in rows:
        if row["surface"] == "answer" and gated(row, refusal, judge):
            row = {
                **row,
                "answer": NO_CONTEXT_ANSWER,
                "correct": row["expected"] is None,
                "fixed_sentence": True,
                "total_s": row["ttft_s"],
            }
        out.append(row)
    return out


def outcome(rows: list[dict[str, Any]], refusal: float, judge: float) -> Outcome:
    per_set: dict[str, list[int]] = {}
    for row in rows:
        cut = gated(row, refusal, judge)
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
        refusal,
        judge,
        answered=totals[0],
        answerable=totals[1],
        refused=totals[2],
        unanswerable=totals[3],
        mean_over_sets=sum(means) / len(means) if means else 0.0,
    )


def calibrate(grid: list[Outcome], ungated: Outcome) -> Outcome:
    """The best mean over sets among the pairs within `ACCURACY_GIVEN` of the
    ungated accuracy (the loosest pair when none is)."""
    kept = [o for o in grid if o.accuracy >= ungated.accuracy - ACCURACY_GIVEN - 1e-9]
    if not kept:
        return max(grid, key=lambda o: (o.accuracy, o.refusals))
    return max(kept, key=lambda o: (o.mean_over_sets, o.accuracy))


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
        return float(r["refusal_probability"] or 0.0)

    def weak_evidence(r: dict[str, Any]) -> float:
        return -float(r["evidence_score"] or 0.0)

    def judge_no(r: dict[str, Any]) -> float:
        return 1.0 - float(r["answerable_probability"])

    signals: dict[str, Callable[[dict[str, Any]], float]] = {
        "refusal probability": refusal,
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
        f"judge < {o.judge:<4} or refusal > {o.refusal:<4}: "
        f"accuracy {o.answered}/{o.answerable} ({o.accuracy:.0%}), "
        f"refusals {o.refused}/{o.unanswerable} ({o.refusals:.0%}), "
        f"mean over sets {o.mean_over_sets:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", type=Path, help="results of a benches/rag_eval.py --ungated run")
    parser.add_argument(
        "--split",
        choices=["dev", "test", "all"],
        default="dev",
        help="the questions the grid is scored on (default dev: calibrate there, report test)",
    )
    parser.add_argument(
        "--gated-json", type=Path, help="write the run as the presets' gates would answer it"
    )
    args = parser.parse_args()
    report = json.loads(args.run.read_text())
    everything = [r for r in report["answers"] if r["surface"] == "answer"]
    rows = [r for r in everything if args.split in ("all", r["split"])]
    if args.split == "dev":  # the held-out sets' dev splits are not for tuning either
        rows = [r for r in rows if r["set"] not in eval_sets.HELD_OUT]
    if not rows:
        parser.error(f"{args.run}: no answers of the {args.split} split")
    for llm in dict.fromkeys(r["llm"] for r in rows):
        settings = report["settings"][llm]
        mine = [r for r in rows if r["llm"] == llm]
        if settings.get("probe_threshold") is not None:
            if settings["probe_threshold"] > 0.001:
                parser.error(f"{args.run}: {llm}'s probe declined answers; score an --ungated run")
            print(f"== {llm}: the answerability probe's thresholds (accuracy, refusals)")
            for threshold, o in probe_outcomes(mine):
                print(
                    f"   probe < {threshold:<4}: accuracy {o.answered}/{o.answerable} "
                    f"({o.accuracy:.0%}), refusals {o.refused}/{o.unanswerable} ({o.refusals:.0%})"
                )
            continue
        if settings.get("refusal_probability", 1) < 1 or settings.get("judge", 0) > 0.01:
            parser.error(f"{args.run}: {llm} was gated ({settings}); score an --ungated run")
        judged = all(r.get("answerable_probability") is not None for r in mine)
        grid = [outcome(mine, r, j) for r in REFUSALS for j in (JUDGES if judged else [0.0])]
        calibration = PRESETS[llm].calibration
        print(f"== {llm}")
        given = outcome(mine, calibration.refusal_probability, calibration.judge)
        print("calibrated:", line(given))
        print("best of the grid (fitted on this run):")
        for o in sorted(grid, key=lambda o: -o.mean_over_sets)[:3]:
            print("  ", line(o))
        print("the calibration rule picks:", line(calibrate(grid, outcome(mine, 1.0, 0.0))))
        aucs = ", ".join(f"{name} {value:.3f}" for name, value in separation(mine).items())
        print(f"AUC unanswerable vs answerable: {aucs}")
        print("frontier (the most refusals at each accuracy):")
        for o in frontier(grid):
            print("  ", line(o))
    if args.gated_json:
        gated_rows: list[dict[str, Any]] = []
        for llm in dict.fromkeys(r["llm"] for r in everything):
            calibration = PRESETS[llm].calibration
            mine = [r for r in report["answers"] if r["llm"] == llm]
            gated_rows += apply_gates(mine, calibration.refusal_probability, calibration.judge)
            report["settings"][llm].update(
                refusal_probability=calibration.refusal_probability, judge=calibration.judge
            )
        report["answers"] = gated_rows
        args.gated_json.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
