"""Several layers for the probe's first stage: does a mean or a concatenation
of the shipped layer's neighbours beat the shipped layer alone?

Reads the collected rows (every layer's state: `answer_probe.py collect`,
in its cache directory, not committed), keeps everything else as the shipped
choice (row weights, folds, stage 2, signals, quoting) and scores each
combination of layers at three strengths of L2 the way
`answer_probe.py search` does: stage 1's AUC out-of-fold over six folds and
with each set left out, the gate's out-of-fold AUC, and the dev frontier
(declined / right) at the preset's refusal target and the targets below it.

    .venv/bin/python benches/answer_probe.py collect --llms qwen2.5-coder-1.5b --skip reworded
    .venv/bin/python benches/probe_layers.py --llms qwen2.5-coder-1.5b
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from benches import answer_probe, probe_fit
from flask_app.inference.presets import PRESETS

C_GRID = (0.001, 0.003, 0.01)


def combinations(layer: int) -> list[tuple[str, tuple[int, ...]]]:
    """Around the shipped layer: itself, its neighbours, their means and concatenations."""
    return [
        ("mean", (layer,)),
        ("mean", (layer + 1,)),
        ("mean", (layer, layer + 1)),
        ("mean", (layer - 1, layer, layer + 1)),
        ("mean", tuple(range(layer - 2, layer + 3))),
        ("mean", tuple(range(layer - 4, layer + 5, 2))),
        ("concatenation", (layer, layer + 1)),
        ("concatenation", (layer - 1, layer, layer + 1)),
        ("concatenation", (layer - 6, layer)),
        ("concatenation", (layer, layer + 6)),
    ]


def features(
    states: np.ndarray, collected: list[int], how: str, layers: tuple[int, ...]
) -> np.ndarray:
    """Each row's input to stage 1: the mean of `layers`' states, or their concatenation."""
    picked = states[:, [collected.index(layer) for layer in layers], :].astype(np.float64)
    return picked.mean(axis=1) if how == "mean" else picked.reshape(len(states), -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--llms", nargs="+", choices=list(PRESETS), default=list(PRESETS))
    parser.add_argument("--data", type=Path, default=answer_probe.cache_dir())
    args = parser.parse_args()
    for llm in args.llms:
        meta, states = answer_probe.load(args.data, llm)
        _, shipped, _ = answer_probe.load_training(llm)
        gate = answer_probe.refusal_gate(llm)
        targets = [t for t in answer_probe.DEV_TARGETS if t < shipped.refusal_target][-3:]
        targets.append(shipped.refusal_target)
        print(f"{llm}: {len(meta)} rows, shipped layer {shipped.layer}, C {shipped.c}")
        for how, layers in combinations(shipped.layer):
            hidden = features(states, meta[0]["layers"], how, layers)
            rows = probe_fit.as_served(probe_fit.Rows(meta, hidden), shipped, gate)
            for c in C_GRID:
                choice = replace(shipped, c=c)
                aucs = answer_probe.stage1_aucs(rows, choice.hidden())
                fitted = probe_fit.fit(rows, choice)
                frontier = [probe_fit.threshold_for(rows, fitted.oof, t) for t in targets]
                print(
                    f"  {how} of {list(layers)}, C {c}: stage 1 AUC {aucs[0]:.3f} / sets left "
                    f"out {aucs[1]:.3f}, gate {probe_fit.gate_auc(rows, fitted.oof):.3f}; "
                    + ", ".join(f"{o.refusals:.0%}/{o.accuracy:.1%}" for o in frontier),
                    flush=True,
                )


if __name__ == "__main__":
    main()
