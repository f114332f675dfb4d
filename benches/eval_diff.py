"""Two `benches/rag_eval.py` runs of the same questions against each other:
per model and set, answerable questions answered right and unanswerable ones
declined, before → after, then every question whose answer changed.

A run made with `--ungated` is also read as served (`gate_grid.outcome`): an
answer counts only when the probe's recorded probability reaches the
threshold the run's settings name (`probe_fitted_threshold`) and the first
token's refusal probability is at most the preset's refusal gate. Gates only cut an answer
short, so this is what the served run would have said (the probe's own
training rows give an in-sample figure: say so when quoting dev).

    .venv/bin/python benches/eval_diff.py BEFORE.json AFTER.json [--sets own product-help]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benches.gate_grid import outcome
from flask_app.inference.presets import PRESETS

Key = tuple[str, str, str]  # (model, set, question)


def answers(run: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    return {
        (a["llm"], a["set"], a["question"]): a for a in run["answers"] if a["surface"] == "answer"
    }


def gates(run: dict[str, Any], llm: str) -> tuple[float, float]:
    """(refusal, probe) thresholds for `gate_grid.outcome` to read the run as
    served: an ungated run at the fitted probe threshold and the preset's
    refusal gate (the probe's probability is the row's
    `answerable_probability`, which `outcome` thresholds as it does the
    judge's); a run whose gates already acted, as it is."""
    settings = run["settings"].get(llm, {})
    threshold = settings.get("probe_fitted_threshold")
    if settings.get("probe_threshold", 1.0) > 1e-6 or threshold is None:
        return 1.0, 0.0
    return PRESETS[llm].calibration.refusal_probability, threshold


def report(before: dict[str, Any], after: dict[str, Any], sets: list[str] | None) -> list[str]:
    old, new = answers(before), answers(after)
    shared = [k for k in old if k in new and (sets is None or k[1] in sets)]
    lines = []
    for llm in dict.fromkeys(k[0] for k in shared):
        mine = [k for k in shared if k[0] == llm]
        for name in [*dict.fromkeys(k[1] for k in mine), None]:
            keys = [k for k in mine if name is None or k[1] == name]
            a = outcome([old[k] for k in keys], *gates(before, llm))
            b = outcome([new[k] for k in keys], *gates(after, llm))
            lines.append(
                f"{llm} {name or 'all'}: right {a.answered} → {b.answered} of {a.answerable}, "
                f"declined {a.refused} → {b.refused} of {a.unanswerable}"
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
