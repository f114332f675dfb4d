"""Right / wrong / declined at every verifier threshold, from one run.

    .venv/bin/python benches/quality/rag_eval.py --open-gate --split dev --squad \
        --surfaces answer --llms qwen2.5-coder-1.5b --json dev.json
    .venv/bin/python -m benches.quality.frontier dev.json

A run made with `--open-gate` answers every question and records the
probability the verifier gave the chosen answer: at threshold t a question
is declined when its answer is a refusal or its probability is below t
(or the file's answerability floor declined it, at every t): exactly what
serving at t gives. Right and wrong are shares of the
answerable questions, declined of the unanswerable ones, per model, family
(SQuAD's articles, our sets) and split; `--target` marks, per family, the
lowest threshold that declines at least that share.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

THRESHOLDS = [round(0.05 * i, 2) for i in range(1, 20)]


def outcome(row: dict[str, Any], threshold: float) -> str:
    """'right', 'wrong' or 'declined' for one row at `threshold`."""
    probability = row.get("answerable_probability")
    declined = not row["found"] or probability is None or probability < threshold
    if row["expected"] is None:
        return "declined" if declined else "wrong"
    if declined:
        return "declined"
    return "right" if row["correct"] else "wrong"


def point(rows: list[dict[str, Any]], threshold: float) -> dict[str, float | None]:
    """Right and wrong (of the answerable) and declined (of the unanswerable)."""
    answerable = [outcome(r, threshold) for r in rows if r["expected"] is not None]
    unanswerable = [outcome(r, threshold) for r in rows if r["expected"] is None]

    def share(part: list[str], kind: str) -> float | None:
        return round(part.count(kind) / len(part), 3) if part else None

    return {
        "right": share(answerable, "right"),
        "wrong": share(answerable, "wrong"),
        "declined": share(unanswerable, "declined"),
    }


def frontiers(report: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per model, per "family/split", a point for each threshold (and the served one)."""
    rows = [r for r in report["answers"] if r["surface"] == "answer"]
    result: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for llm in dict.fromkeys(r["llm"] for r in rows):
        served = report["settings"][llm].get("verifier_threshold")
        grid = sorted({*THRESHOLDS, *([served] if served is not None else [])})
        mine = [r for r in rows if r["llm"] == llm]
        groups = sorted({(r.get("family", "sets"), r["split"]) for r in mine})
        result[llm] = {
            f"{family}/{split}": [
                {"threshold": t, "served": t == served, **point(part, t)} for t in grid
            ]
            for family, split in groups
            for part in [
                [r for r in mine if r.get("family", "sets") == family and r["split"] == split]
            ]
        }
    return result


def table(points: list[dict[str, Any]], target: float | None) -> str:
    def pct(value: float | None) -> str:
        return "–" if value is None else f"{value:.1%}"

    lowest = next(
        (p["threshold"] for p in points if target is not None and (p["declined"] or 0) >= target),
        None,
    )
    lines = ["| threshold | right | wrong | declined |", "|---|---|---|---|"]
    for p in points:
        mark = (" (served)" if p["served"] else "") + (
            " (target)" if p["threshold"] == lowest else ""
        )
        lines.append(
            f"| {p['threshold']:.3g}{mark} | {pct(p['right'])} | {pct(p['wrong'])} "
            f"| {pct(p['declined'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="rag_eval.py --open-gate JSON files")
    parser.add_argument("--target", type=float, help="mark the lowest threshold declining this")
    args = parser.parse_args()
    for path in args.runs:
        report = json.loads(path.read_text())
        if not all(s.get("open_gate") for s in report["settings"].values()):
            parser.error(f"{path} was not run with --open-gate: its declines hide their answers")
        for llm, groups in frontiers(report).items():
            for group, points in groups.items():
                print(f"\n{path.name}: {llm}, {group}\n" + table(points, args.target))


if __name__ == "__main__":
    main()
