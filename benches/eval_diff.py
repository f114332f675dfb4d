"""Two `benches/rag_eval.py` runs of the same questions against each other:
per model and set, answerable questions answered right and unanswerable ones
declined, before → after, then every question whose answer changed.

A run made with `--ungated` is also read as served: an answer counts only
when the probe's recorded probability reaches the threshold the run's
settings name (`probe_fitted_threshold`) and the first token's refusal
probability is at most the preset's refusal gate. Gates only cut an answer
short, so this is what the served run would have said (the probe's own
training rows give an in-sample figure: say so when quoting dev).

    .venv/bin/python benches/eval_diff.py BEFORE.json AFTER.json [--sets own product-help]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from flask_app.inference.presets import PRESETS

Key = tuple[str, str, str]  # (model, set, question)


def answers(run: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    return {
        (a["llm"], a["set"], a["question"]): a for a in run["answers"] if a["surface"] == "answer"
    }


def served_gate(run: dict[str, Any], llm: str) -> tuple[float, float] | None:
    """(probe threshold, refusal threshold) to read an ungated run as served;
    None for a run whose gates already acted."""
    settings = run["settings"].get(llm, {})
    if settings.get("probe_threshold", 1.0) > 1e-6:
        return None
    threshold = settings.get("probe_fitted_threshold")
    if threshold is None:
        return None
    return threshold, PRESETS[llm].calibration.refusal_probability


def outcome(row: dict[str, Any], gate: tuple[float, float] | None) -> tuple[bool, bool]:
    """(answered right, declined) for one row, as served."""
    if gate is None:
        right = bool(row["expected"]) and row["correct"]
        return right, not row["expected"] and row["correct"]
    probe, refusal = gate
    passes = (row["answerable_probability"] or 0.0) >= probe and (
        row["refusal_probability"] or 0.0
    ) <= refusal
    if row["expected"]:
        return row["correct"] and passes, False
    return False, row["correct"] or not passes


def tally(
    rows: list[dict[str, Any]], gate: tuple[float, float] | None
) -> tuple[int, int, int, int]:
    """(right, answerable, declined, unanswerable)."""
    results = [outcome(r, gate) for r in rows]
    answerable = sum(bool(r["expected"]) for r in rows)
    right = sum(o[0] for o in results)
    declined = sum(o[1] for o in results)
    return right, answerable, declined, len(rows) - answerable


def report(before: dict[str, Any], after: dict[str, Any], sets: list[str] | None) -> list[str]:
    old, new = answers(before), answers(after)
    shared = [k for k in old if k in new and (sets is None or k[1] in sets)]
    lines = []
    for llm in dict.fromkeys(k[0] for k in shared):
        gates = served_gate(before, llm), served_gate(after, llm)
        mine = [k for k in shared if k[0] == llm]
        for name in [*dict.fromkeys(k[1] for k in mine), None]:
            keys = [k for k in mine if name is None or k[1] == name]
            a = tally([old[k] for k in keys], gates[0])
            b = tally([new[k] for k in keys], gates[1])
            lines.append(
                f"{llm} {name or 'all'}: right {a[0]} → {b[0]} of {a[1]}, "
                f"declined {a[2]} → {b[2]} of {a[3]}"
            )
        for k in mine:
            x, y = old[k], new[k]
            if x["answer"] != y["answer"]:
                lines.append(f"  [{k[1]}] {k[2]} (expected {x['expected']})")
                for tag, row in (("before", x), ("after", y)):
                    p = row["answerable_probability"]
                    shown = "-" if p is None else f"{p:.2f}"
                    lines.append(f"    {tag}: P {shown}, {row['answer'][:120]!r}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--sets", nargs="+", help="only these sets (default: every shared one)")
    args = parser.parse_args()
    runs = [json.loads(p.read_text()) for p in (args.before, args.after)]
    print("\n".join(report(runs[0], runs[1], args.sets)))


if __name__ == "__main__":
    main()
