"""On-topic negatives with the subject kept: does training stage 1 on them help?

The unanswerable questions the probes let through are about what the
documents discuss, not what they say ("How long does it take to charge the
Pulse P5?" over the P5's sheet, which gives its play time). `withheld` rows
(answer_probe.py) delete every passage holding a question's fact, and with
it, mostly, the subject. Here each answerable dev question of the tuned sets
is asked again with only the sentences that hold its fact cut from those
passages (the rest of each passage stays in the store): its documents still
talk about the subject and no longer answer. The label "the prompt holds the
fact" is read from the prompt, as for every row.

The rows (the shipped probe's layer only) replace the `withheld` rows of the
committed training rows at several weights; each fit is scored the way
`answer_probe.py search` scores (stage 1's AUC out-of-fold over six folds and
with each set left out) and by the dev frontier.

    .venv/bin/python benches/probe_cut_rows.py --llms qwen2.5-coder-0.5b qwen2.5-coder-1.5b
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any

import numpy as np

from benches import answer_probe, eval_sets, probe_fit
from benches.rag_eval import mentions, upload_items
from flask_app.api.http.extensions import answer_config_of
from flask_app.inference.presets import PRESETS
from flask_app.rag.text import sentences

TARGETS = (0.70, 0.80, 0.85, 0.92)
WEIGHTS = (0.25, 0.5, 1.0)


def without_fact(text: str, expected: list[str]) -> str:
    """`text` less its sentences that hold the fact ("" when nothing is left)."""
    kept = [s.text.strip() for s in sentences(text, 0, len(text)) if not mentions(s.text, expected)]
    return " ".join(kept).strip()


def collect(llm: str, layer: int) -> tuple[list[dict[str, Any]], np.ndarray]:
    """One `cut` row per answerable dev question of the tuned sets."""
    rows: list[dict[str, Any]] = []
    states = []
    started = time.perf_counter()
    for name in eval_sets.TUNED:
        evset = eval_sets.load(name)
        items = evset.passages()
        with answer_probe.ungated_app(llm) as (services, app):
            client = app.test_client()
            upload_items(client, items)
            with app.app_context():
                config = replace(answer_config_of(app), hidden_layers=(layer,))
            dev = [q for q in evset.questions if q["split"] == "dev" and q["expect"] is not None]
            for q in dev:
                held = [it for it in items if mentions(it["text"], q["expect"])]
                cut = [
                    {"id": it["id"], "text": rest}
                    for it in held
                    if (rest := without_fact(it["text"], q["expect"]))
                ]
                with answer_probe.swapped(services, client, held, cut):
                    asked = answer_probe.ask(services, config, q["q"])
                grade = answer_probe.graded(asked, None)
                rows.append(
                    {
                        "set": name,
                        "split": "dev",
                        "question": q["q"],
                        "of": q["q"],
                        "expected": q["expect"],
                        "kind": "withheld",  # weighed as withheld rows are
                        "answerable": False,
                        **{k: v for k, v in asked.items() if k != "states"},
                        **grade,
                        "evidence_holds": mentions(asked["prompt"], q["expect"]),
                    }
                )
                states.append(asked["states"][0])
        print(f"{llm}: {name} done, {len(rows)} rows, {time.perf_counter() - started:.0f} s")
    return rows, np.stack(states).astype(np.float64)


def score(rows: probe_fit.Rows, choice: probe_fit.Choice) -> str:
    hidden = choice.hidden()
    folds, by_set = probe_fit.kfolds(rows), probe_fit.set_folds(rows)
    six = answer_probe._auc(rows, probe_fit.stage1_oof(rows, hidden, folds))
    left_out = answer_probe._auc(rows, probe_fit.stage1_oof(rows, hidden, by_set))
    fitted = probe_fit.fit(rows, choice)
    points = [probe_fit.threshold_for(rows, fitted.oof, t) for t in TARGETS]
    frontier = ", ".join(f"{o.refusals:.0%} / {o.accuracy:.0%}" for o in points)
    gate = probe_fit.gate_auc(rows, fitted.oof)
    return f"stage 1 {six:.3f} / {left_out:.3f}, gate {gate:.3f}; {frontier}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llms", nargs="+", choices=list(PRESETS), default=list(PRESETS))
    args = parser.parse_args()
    for llm in args.llms:
        rows, choice, _ = answer_probe.load_training(llm)
        cut, states = collect(llm, choice.layer)
        print(
            f"{llm}: {len(cut)} cut rows; the prompt still holds the fact in "
            f"{sum(r['evidence_holds'] for r in cut)}, the model refused "
            f"{sum(r['refused'] for r in cut)}"
        )
        own = [i for i, r in enumerate(rows.meta) if r["kind"] != "withheld"]
        with_cut = probe_fit.Rows(
            [rows.meta[i] for i in own] + cut, np.concatenate([rows.hidden[own], states])
        )
        targets = ", ".join(f"{t:.0%}" for t in TARGETS)
        print(f"{llm}: AUC six-fold / set left out; declined / right at {targets}")
        print(f"  shipped ({choice.withheld_weight} withheld): {score(rows, choice)}")
        for weight in WEIGHTS:
            tried = replace(choice, withheld_weight=weight)
            print(f"  cut rows at {weight} instead: {score(with_cut, tried)}")


if __name__ == "__main__":
    main()
