"""The verifier's model, fitted on the rows: a probe over one hidden state,
then a second stage weighing its logit beside what else the server knows
(agreement, log-probability, grounding, answerability)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from benches.quality.candidates import LAYERS
from benches.quality.served_answer import cut, served_tokens
from benches.quality.verifier_rows import Array, Rows, candidate_table
from flask_app.rag import verifier


@dataclass(frozen=True)
class Probe:
    """A standardised logistic regression over one state."""

    reads: str
    layer: int
    mean: Array
    scale: Array
    coef: Array
    intercept: float

    def logits(self, x: Array) -> Array:
        return ((x - self.mean) / self.scale) @ self.coef + self.intercept

    def folded(self) -> tuple[list[float], float]:
        """Weights and bias over the raw state (the standardisation folded in)."""
        w = self.coef / self.scale
        return [float(v) for v in w], float(self.intercept - np.dot(w, self.mean))


def fit_probe(x: Array, y: Array, reads: str, layer: int, c: float) -> Probe:
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    model = LogisticRegression(C=c, max_iter=2000, tol=1e-6)
    model.fit((x - mean) / scale, y)
    return Probe(
        reads, layer, mean, scale, model.coef_[0].astype(np.float64), float(model.intercept_[0])
    )


def auc(y: Array, score: Array) -> float:
    return float(roc_auc_score(y, score)) if 0 < y.sum() < len(y) else float("nan")


# --- the second stage: the probe's logit beside what else the server knows ---------

COMBINED = ("agreement", "logprob", "grounded", "answerable")


def shipped_prompt_probe(llm: str) -> dict[str, Any] | None:
    """The answerability probe over the prompt's last token that the preset's
    shipped file carries, as the file holds it (None: it has none); a rebuilt
    file carries it on unchanged."""
    path = verifier.verifier_path(llm)
    if not path.is_file():
        return None
    return _answerable_entry(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _answerable_entry(path: Path, _mtime_ns: int) -> dict[str, Any] | None:
    """(read once per version of the file: `features` runs many times)"""
    held: dict[str, Any] | None = json.loads(path.read_text()).get("answerable")
    return held


def answerability_logits(rows: Rows, llm: str, qs: np.ndarray) -> Array:
    """The shipped prompt probe's logit for each question of `qs`, as the
    server computes it (NaN: no probe, or its layer not in the rows)."""
    held = shipped_prompt_probe(llm)
    if held is None or held["layer"] not in LAYERS[llm]:
        return np.full(len(qs), np.nan)
    probe = verifier.LinearProbe.from_dict(held)
    at = LAYERS[llm].index(probe.layer)
    return np.array([probe.logit(rows.prompt[int(q), at].astype(np.float32)) for q in qs])


def prompt_table(rows: Rows, llm: str, layer: int) -> tuple[Array, Array]:
    """Per question: the prompt's last-token state at `layer`, and whether
    its greedy answer is right (an unanswerable question's never is)."""
    x = rows.prompt[:, LAYERS[llm].index(layer)].astype(np.float64)
    y = np.array([row["candidates"][0]["grade"] == "right" for row in rows.questions])
    return x, y.astype(np.float64)


def fit_prompt_probe(rows: Rows, llm: str, layer: int, c: float) -> Probe:
    """An answerability probe fitted on the rows: the prompt's state -> the
    greedy answer is right (for a preset whose file ships none)."""
    x, y = prompt_table(rows, llm, layer)
    return fit_probe(x, y, "prompt", layer, c)


def prompt_out_of_fold(rows: Rows, llm: str, layer: int, c: float) -> Array:
    """The fitted prompt probe's logit of every train question from a fit without its article."""
    x, y = prompt_table(rows, llm, layer)
    groups = np.array([row["group"] for row in rows.questions])
    return folded_logits(x, y, groups, "prompt", layer, c)


def prompt_logits(rows: Rows, llm: str, prompt: Probe | None) -> Array:
    """Per question: the answerability logit, from the fitted prompt probe
    when given, else from the shipped one (NaN: neither)."""
    if prompt is None:
        return answerability_logits(rows, llm, np.arange(len(rows.questions)))
    x, _ = prompt_table(rows, llm, prompt.layer)
    return prompt.logits(x)


def features(
    rows: Rows,
    llm: str,
    probe: Probe,
    samples: int | None,
    logits: Array | None = None,
    prompt: Probe | None = None,
    prompt_oof: Array | None = None,
) -> tuple[dict[str, Array], Array, np.ndarray, np.ndarray]:
    """Per candidate of `candidate_table` (same order): each feature the
    verifier may weigh (NaN: not measurable), its label, question and
    candidate index. `logits`: the probe's, when given (out of fold);
    `prompt`: a fitted answerability probe (else the shipped one), its
    per-question logits `prompt_oof` when given (out of fold)."""
    x, y, qs, cs = candidate_table(rows, probe.reads, probe.layer, llm, samples)
    names = [n for n in COMBINED if n != "answerable"]
    served = served_tokens(probe.reads)
    values: dict[str, list[float]] = {name: [] for name in names}
    for qi, ci in zip(qs, cs, strict=True):
        row = rows.questions[int(qi)]
        shown = row["candidates"][: None if samples is None else samples + 1]
        held = [cut(llm, c, served) for c in shown]
        text, logprobs = held[int(ci)]
        others = [t for j, (t, _) in enumerate(held) if j != ci]
        found = {
            "agreement": verifier.agreement(text, others),
            "logprob": float(np.mean(logprobs)) if logprobs else None,
            "grounded": verifier.grounded(text, row.get("prompt", "")),
        }
        for name in names:
            value = found[name]
            values[name].append(np.nan if value is None else float(value))
    out = {name: np.asarray(v, dtype=np.float64) for name, v in values.items()}
    per_question = prompt_oof if prompt_oof is not None else prompt_logits(rows, llm, prompt)
    out["answerable"] = per_question[qs] if len(qs) else np.zeros(0)
    out["correct"] = probe.logits(x) if logits is None else logits
    return out, y, qs, cs


@dataclass(frozen=True)
class Model:
    """What the file holds: the probe, and the weights of the second stage."""

    probe: Probe
    weights: dict[str, float]  # by feature ("correct": the probe's logit)
    bias: float
    fill: dict[str, float]  # a feature that cannot be measured takes this
    prompt: Probe | None = None  # the answerability probe fitted beside it (None: shipped)

    def probabilities(
        self, rows: Rows, llm: str, samples: int | None
    ) -> tuple[Array, np.ndarray, np.ndarray]:
        values, _, qs, cs = features(rows, llm, self.probe, samples, prompt=self.prompt)
        z = np.full(len(qs), self.bias)
        for name, weight in self.weights.items():
            column = values[name]
            z += weight * np.where(np.isnan(column), self.fill.get(name, 0.0), column)
        return 1 / (1 + np.exp(-z)), qs, cs

    def scaled(self, a: float, b: float) -> Model:
        """sigmoid(a * z + b) instead of sigmoid(z): calibrated."""
        return Model(
            self.probe,
            {k: a * w for k, w in self.weights.items()},
            a * self.bias + b,
            self.fill,
            self.prompt,
        )


def stage_one(probe: Probe) -> Model:
    return Model(probe, {"correct": 1.0}, 0.0, {})


def out_of_fold_logits(rows: Rows, reads: str, layer: int, llm: str, c: float) -> Array:
    """The probe's logit of every train candidate from a fit without its article."""
    x, y, qs, _ = candidate_table(rows, reads, layer, llm)
    groups = np.array([rows.questions[int(q)]["group"] for q in qs])
    return folded_logits(x, y, groups, reads, layer, c)


def folded_logits(
    x: Array, y: Array, groups: np.ndarray, reads: str, layer: int, c: float
) -> Array:
    """Each row's logit from a probe fitted without its group (5 folds by article)."""
    from sklearn.model_selection import GroupKFold

    out = np.zeros(len(y))
    for train, held in GroupKFold(5).split(x, y, groups):
        out[held] = fit_probe(x[train], y[train], reads, layer, c).logits(x[held])
    return out


def fit_second_stage(
    rows: Rows,
    llm: str,
    probe: Probe,
    oof: Array,
    names: Sequence[str],
    prompt: Probe | None = None,
    prompt_oof: Array | None = None,
) -> Model:
    """Weights for the probe's (out-of-fold) logit and `names`, fitted on train
    (`prompt`, `prompt_oof`: a fitted answerability probe and its out-of-fold logits)."""
    values, y, _, _ = features(rows, llm, probe, None, oof, prompt, prompt_oof)
    fill = {name: float(np.nanmean(values[name])) for name in names}
    columns = ["correct", *names]
    matrix = np.column_stack(
        [np.where(np.isnan(values[n]), fill.get(n, 0.0), values[n]) for n in columns]
    )
    model = LogisticRegression(C=1.0, max_iter=2000, tol=1e-8)
    model.fit(matrix, y)
    weights = {n: float(w) for n, w in zip(columns, model.coef_[0], strict=True)}
    return Model(probe, weights, float(model.intercept_[0]), fill, prompt)


def calibrate(logits: Array, right: Array) -> tuple[float, float]:
    """(a, b) with sigmoid(a * logit + b) calibrated on the chosen answers."""
    model = LogisticRegression(C=1e6, max_iter=1000, tol=1e-8)
    model.fit(logits.reshape(-1, 1), right)
    return float(model.coef_[0][0]), float(model.intercept_[0])
