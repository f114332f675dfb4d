"""Other classifiers for the probe's first stage, on the committed dev rows:
does anything beat the shipped logistic regression? Each replaces stage 1 in
`probe_fit` (the same rows, row weights, folds, stage 2 and signals as the
shipped choice) and is scored the way `answer_probe.py search` scores:
the gate's AUC (right answers against unanswerable questions, out-of-fold
over six folds and with each set left out) and the dev frontier at three
refusal targets.

    .venv/bin/python benches/probe_classifiers.py --llms qwen2.5-coder-0.5b qwen2.5-coder-1.5b
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from benches import answer_probe, probe_fit

TARGETS = (0.70, 0.80, 0.92)
Folds = Sequence[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]]


def _balanced_logistic(c: float) -> LogisticRegression:
    return LogisticRegression(C=c, class_weight="balanced", max_iter=5_000)


# name -> a fresh model; None is the shipped stage 1 (probe_fit.stage1_oof)
CLASSIFIERS: dict[str, Callable[[], Pipeline] | None] = {
    "logistic (shipped)": None,
    "shrinkage LDA": lambda: make_pipeline(
        StandardScaler(), LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")
    ),
    "PCA 32 + logistic": lambda: make_pipeline(
        StandardScaler(), PCA(32, random_state=0), _balanced_logistic(0.1)
    ),
    "PCA 128 + logistic": lambda: make_pipeline(
        StandardScaler(), PCA(128, random_state=0), _balanced_logistic(0.1)
    ),
    "PCA 64 + RBF SVM": lambda: make_pipeline(
        StandardScaler(), PCA(64, random_state=0), SVC(kernel="rbf", class_weight="balanced")
    ),
    "PCA 64 + MLP (32)": lambda: make_pipeline(
        StandardScaler(),
        PCA(64, random_state=0),
        MLPClassifier((32,), alpha=1.0, max_iter=2_000, random_state=0),
    ),
}


def stage1(make: Callable[[], Pipeline]) -> Callable[..., Any]:
    """A stage-1 out-of-fold scorer with `make`'s model in place of the logistic one."""

    def oof(rows: probe_fit.Rows, choice: probe_fit.HiddenChoice, folds: Folds) -> Any:
        y = rows.flag("evidence_holds").astype(int)
        weight = probe_fit.stage1_weights(rows, choice)
        out = np.full(len(rows.meta), np.nan)
        for train, test in folds:
            keep = train[weight[train] > 0]
            model = make()
            last = model.steps[-1][0]
            try:
                model.fit(rows.hidden[keep], y[keep], **{f"{last}__sample_weight": weight[keep]})
            except TypeError:  # the MLP takes no row weights
                model.fit(rows.hidden[keep], y[keep])
            if hasattr(model, "decision_function"):
                out[test] = model.decision_function(rows.hidden[test])
            else:
                out[test] = np.log(model.predict_proba(rows.hidden[test])[:, 1] + 1e-9)
        return out

    return oof


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llms", nargs="+", default=["qwen2.5-coder-0.5b"])
    args = parser.parse_args()
    shipped = probe_fit.stage1_oof
    for llm in args.llms:
        rows, choice, _ = answer_probe.load_training(llm)
        learn = choice.hidden().learns(rows)
        print(f"{llm}: {len(rows.meta)} rows, layer {choice.layer}")
        for name, make in CLASSIFIERS.items():
            probe_fit.stage1_oof = shipped if make is None else stage1(make)
            try:
                fitted = probe_fit.fit(rows, choice)
                by_set = probe_fit.set_folds(rows)
                h_set = probe_fit.stage1_oof(rows, choice.hidden(), by_set)
                p_set = probe_fit.stage2_oof(rows, h_set, choice.signals, by_set, learn)
            finally:
                probe_fit.stage1_oof = shipped
            frontier = " ".join(
                f"{o.refusals:.0%}/{o.accuracy:.0%}"
                for o in (probe_fit.threshold_for(rows, fitted.oof, t) for t in TARGETS)
            )
            print(
                f"  {name:20s} gate AUC {probe_fit.gate_auc(rows, fitted.oof):.3f} / "
                f"sets left out {probe_fit.gate_auc(rows, p_set):.3f}; "
                f"six-fold declined/right at {', '.join(f'{t:.0%}' for t in TARGETS)}: {frontier}",
                flush=True,
            )


if __name__ == "__main__":
    main()
