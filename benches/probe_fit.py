"""Fitting an answerability probe from collected rows (benches/answer_probe.py).

Everything here looks at dev rows only. Two stages:

1. **Hidden.** A logistic regression over the hidden state of the prompt's
   last token at one layer (standardised, L2 with strength 1/C, balanced
   classes), trained to tell rows whose prompt holds the expected fact
   (`evidence_holds`) from the rest; `withheld` rows weigh `withheld_weight`.
2. **Combine.** A logistic regression over the first stage's score and the
   scalar signals (the refusal probability's logit, the evidence cosine, …),
   trained on out-of-fold first-stage scores of the asked rows to predict the
   ungated answer being right.

With `quote_refusals`, the labels are those of a server that answers a row
its model started to refuse (first-token refusal probability above the
preset's gate) with the row's best evidence line: right when that line holds
the expected fact (`with_quotes`); with `quote_yes_no`, so is every question
that asks yes or no (the models cannot read "closed on Mondays" into a no).

The threshold is the highest one at which, on the out-of-fold probabilities
of the dev rows, the share of unanswerable questions declined (by the gate or
by the model itself) still meets the refusal target: refusals first, then as
many answers as the target leaves.

Folds: six stratified folds grouped by question (a question's asked and
withheld rows stay together), and leave-one-set-out for how far the probe
carries to documents it never saw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedGroupKFold

from flask_app.rag.text import asks_yes_or_no

Array = npt.NDArray[np.float64]
FOLDS = 6
SEED = 0


@dataclass(frozen=True)
class Rows:
    """Collected dev rows as arrays: one entry per asked or withheld question."""

    meta: list[dict[str, Any]]
    hidden: Array  # (rows, width): the chosen layer's last-token state

    @property
    def asked(self) -> npt.NDArray[np.bool_]:
        """The set's own questions as written: what every score is measured on."""
        return np.array([r["kind"] == "asked" for r in self.meta])

    @property
    def questions(self) -> npt.NDArray[np.bool_]:
        """Questions over the whole store, as written or reworded (stage 2 learns on these)."""
        return np.array([r["kind"] in ("asked", "reworded") for r in self.meta])

    def kind(self, name: str) -> npt.NDArray[np.bool_]:
        return np.array([r["kind"] == name for r in self.meta])

    def flag(self, key: str) -> npt.NDArray[np.bool_]:
        return np.array([bool(r[key]) for r in self.meta])

    @property
    def sets(self) -> npt.NDArray[np.str_]:
        return np.array([r["set"] for r in self.meta])

    def scalar(self, name: str) -> Array:
        """A signal by the name `rag.answerability.SIGNALS` gives it (NaN: not read)."""

        def logit(p: float | None) -> float:
            if p is None:
                return math.nan
            p = min(max(p, 1e-6), 1 - 1e-6)
            return math.log(p / (1 - p))

        source: Callable[[dict[str, Any]], float] = {
            "refusal_logit": lambda r: logit(r["refusal_probability"]),
            "judge_logit": lambda r: logit(r["judge"]),
            "meaning": lambda r: math.nan if r["closest_meaning"] is None else r["closest_meaning"],
            "evidence_score": lambda r: r["evidence_score"],
            "best_cosine": lambda r: r["best_cosine"],
        }[name]
        return np.array([source(r) for r in self.meta], dtype=np.float64)


def kfolds(rows: Rows) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]]:
    strata = [f"{r['answerable'] and r['kind'] == 'asked'}{r['correct']}" for r in rows.meta]
    groups = [r["of"] for r in rows.meta]
    splitter = StratifiedGroupKFold(n_splits=FOLDS, shuffle=True, random_state=SEED)
    return list(splitter.split(rows.hidden, strata, groups))


def set_folds(rows: Rows) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]]:
    sets = rows.sets
    return [(np.where(sets != s)[0], np.where(sets == s)[0]) for s in sorted(set(sets))]


@dataclass(frozen=True)
class Linear:
    """A fitted logistic score over raw inputs: w·x + b (standardisation folded in)."""

    weights: Array
    bias: float

    def score(self, x: Array) -> Array:
        return np.asarray(x @ self.weights + self.bias, dtype=np.float64)


def sigmoid(z: Array) -> Array:
    return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)


def fit_linear(
    x: Array, y: npt.NDArray[np.bool_], weight: Array, c: float, balanced: bool = True
) -> Linear:
    mean = x.mean(axis=0)
    scale = x.std(axis=0) + 1e-6
    model = LogisticRegression(C=c, class_weight="balanced" if balanced else None, max_iter=5_000)
    model.fit((x - mean) / scale, y.astype(int), sample_weight=weight)
    w = model.coef_[0] / scale
    return Linear(w.astype(np.float64), float(model.intercept_[0] - np.dot(w, mean)))


@dataclass(frozen=True)
class HiddenChoice:
    c: float
    withheld_weight: float
    reworded_weight: float = 1.0
    few_weight: float = 0.0

    def learns(self, rows: Rows) -> npt.NDArray[np.bool_]:
        """The rows stage 2 learns on: the questions, and the few-passage ones if used."""
        return rows.questions | (rows.kind("few") & (self.few_weight > 0))


def stage1_weights(rows: Rows, choice: HiddenChoice) -> Array:
    kinds = {
        "asked": 1.0,
        "withheld": choice.withheld_weight,
        "reworded": choice.reworded_weight,
        "few": choice.few_weight,
    }
    return np.array([kinds[r["kind"]] for r in rows.meta])


def stage1_oof(
    rows: Rows,
    choice: HiddenChoice,
    folds: Sequence[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]],
) -> Array:
    """Out-of-fold hidden scores of every row."""
    y = rows.flag("evidence_holds")
    w = stage1_weights(rows, choice)
    out = np.full(len(rows.meta), np.nan)
    for train, test in folds:
        keep = train[w[train] > 0]
        out[test] = fit_linear(rows.hidden[keep], y[keep], w[keep], choice.c).score(
            rows.hidden[test]
        )
    return out


def stage2_inputs(
    rows: Rows, hidden: Array, signals: Sequence[str], fill: dict[str, float]
) -> Array:
    cols = [hidden]
    for name in signals:
        v = rows.scalar(name)
        cols.append(np.where(np.isnan(v), fill[name], v))
    return np.column_stack(cols)


def fills(rows: Rows, signals: Sequence[str]) -> dict[str, float]:
    """The value a missing signal takes: its mean over the asked rows that have it."""
    out = {}
    for name in signals:
        v = rows.scalar(name)[rows.asked]
        out[name] = float(np.nanmean(v)) if np.isfinite(v).any() else 0.0
    return out


def stage2_oof(
    rows: Rows,
    hidden_oof: Array,
    signals: Sequence[str],
    folds: Sequence[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]],
    learn: npt.NDArray[np.bool_] | None = None,
) -> Array:
    """Out-of-fold P(right) of every row from the out-of-fold hidden scores,
    learnt on `learn` (the questions unless given)."""
    fill = fills(rows, signals)
    z = stage2_inputs(rows, hidden_oof, signals, fill)
    y = rows.flag("correct")
    learn = rows.questions if learn is None else learn
    out = np.full(len(rows.meta), np.nan)
    for train, test in folds:
        keep = train[learn[train]]
        model = fit_linear(z[keep], y[keep], np.ones(len(keep)), 1.0, balanced=False)
        out[test] = sigmoid(model.score(z[test]))
    return out


def gate_auc(rows: Rows, score: Array, kind: str = "asked") -> float:
    """AUC of right answers against unanswerable questions (`kind` rows: the
    set's questions over its whole store, or over their few closest passages)."""
    chosen, answerable, correct = rows.kind(kind), rows.flag("answerable"), rows.flag("correct")
    mask = chosen & (correct | ~answerable)
    return float(roc_auc_score(correct[mask], score[mask]))


def per_set_auc(rows: Rows, score: Array) -> dict[str, float]:
    out = {}
    sets = rows.sets
    for name in sorted(set(sets)):
        part = Rows(
            [r for r, s in zip(rows.meta, sets, strict=True) if s == name],
            rows.hidden[sets == name],
        )
        out[name] = gate_auc(part, score[sets == name])
    return out


@dataclass(frozen=True)
class Outcome:
    threshold: float
    refusals: float  # unanswerable asked rows declined, by the gate or the model
    accuracy: float  # answerable asked rows answered right and not declined


def outcome(rows: Rows, p: Array, threshold: float) -> Outcome:
    asked, answerable = rows.asked, rows.flag("answerable")
    refused, correct = rows.flag("refused"), rows.flag("correct")
    declined = p < threshold
    un, an = asked & ~answerable, asked & answerable
    return Outcome(
        threshold,
        float(((declined | refused) & un).sum() / un.sum()),
        float((~declined & correct & an).sum() / an.sum()),
    )


def outcome_per_set(rows: Rows, p: Array, threshold: float) -> dict[str, Outcome]:
    """`outcome` of each set's rows on their own."""
    sets = rows.sets
    return {
        name: outcome(
            Rows([r for r, s in zip(rows.meta, sets, strict=True) if s == name], rows.hidden),
            p[sets == name],
            threshold,
        )
        for name in sorted(set(sets))
    }


def threshold_for(rows: Rows, p: Array, target: float) -> Outcome:
    """The lowest threshold whose refusals meet `target` (most answers left)."""
    for t in np.unique(np.concatenate([[0.0], p[rows.asked]])):
        result = outcome(rows, p, float(t))
        if result.refusals >= target:
            return result
    return outcome(rows, p, 1.0)


@dataclass(frozen=True)
class Choice:
    """What the search picked on dev, and what `fit` needs to make the probe again."""

    layer: int
    c: float
    withheld_weight: float
    signals: tuple[str, ...]
    refusal_target: float
    reworded_weight: float = 1.0
    few_weight: float = 0.0
    # a refusal the probe lets through is answered by the best evidence line
    quote_refusals: bool = False
    # so is every yes-or-no question the probe lets through
    quote_yes_no: bool = False

    def hidden(self) -> HiddenChoice:
        return HiddenChoice(self.c, self.withheld_weight, self.reworded_weight, self.few_weight)


@dataclass(frozen=True)
class Fitted:
    hidden: Linear
    combine: Linear  # over [hidden score, *signals]
    fill: dict[str, float]
    threshold: float
    oof: Array  # out-of-fold P(right) of every dev row


def fit(rows: Rows, choice: Choice) -> Fitted:
    """The probe from every dev row: stage 1 on all of them, stage 2 on the
    out-of-fold stage-1 scores, the threshold from stage 2's out-of-fold
    probabilities at the refusal target."""
    folds = kfolds(rows)
    y = rows.flag("evidence_holds")
    w = stage1_weights(rows, choice.hidden())
    keep = w > 0
    hidden = fit_linear(rows.hidden[keep], y[keep], w[keep], choice.c)
    h_oof = stage1_oof(rows, choice.hidden(), folds)
    fill = fills(rows, choice.signals)
    z = stage2_inputs(rows, h_oof, choice.signals, fill)
    learn = choice.hidden().learns(rows)
    combine = fit_linear(
        z[learn], rows.flag("correct")[learn], np.ones(int(learn.sum())), 1.0, balanced=False
    )
    p_oof = stage2_oof(rows, h_oof, choice.signals, folds, learn)
    threshold = threshold_for(rows, p_oof, choice.refusal_target).threshold
    return Fitted(hidden, combine, fill, threshold, p_oof)


def probability(fitted: Fitted, rows: Rows, signals: Sequence[str]) -> Array:
    """P(right) of `rows` as the shipped probe computes it while serving."""
    z = stage2_inputs(rows, fitted.hidden.score(rows.hidden), signals, fitted.fill)
    return sigmoid(fitted.combine.score(z))


def quoted_instead(
    row: dict[str, Any], refusal_probability: float, refusals: bool, yes_no: bool
) -> bool:
    """A server quoting refusals (`refusals`) and yes-or-no questions
    (`yes_no`) answers `row`, once its probe passed it, with the best
    evidence line instead of the model's words: its first token gave a
    refusal more than `refusal_probability`, or its question asks yes or no."""
    refusing = (row["refusal_probability"] or 0.0) > refusal_probability
    return (refusals and refusing) or (yes_no and asks_yes_or_no(row["question"]))


def with_quotes(
    rows: Rows, refusal_probability: float, refusals: bool = True, yes_no: bool = False
) -> Rows:
    """The rows as answered by a server that quotes: a row whose first token
    gave a refusal more than `refusal_probability` (with `refusals`), or
    whose question asks yes or no (with `yes_no`), is answered by its best
    evidence line (`quote`; refused when it has none), right when that line
    holds the fact (`quote_correct`)."""
    meta = []
    for r in rows.meta:
        if quoted_instead(r, refusal_probability, refusals, yes_no):
            quoted = r.get("quote") is not None
            r = {**r, "refused": not quoted, "correct": quoted and bool(r["quote_correct"])}
        meta.append(r)
    return Rows(meta, rows.hidden)


def as_served(rows: Rows, choice: Choice, refusal_probability: float) -> Rows:
    """The rows labelled as a server with `choice`'s probe answers them."""
    if not (choice.quote_refusals or choice.quote_yes_no):
        return rows
    return with_quotes(rows, refusal_probability, choice.quote_refusals, choice.quote_yes_no)


QUOTINGS = ((False, False), (True, False), (False, True), (True, True))


def quoting_outcomes(
    rows: Rows, choice: Choice, refusal_probability: float
) -> dict[tuple[bool, bool], Outcome]:
    """Dev's out-of-fold outcome at the refusal target of each way of
    quoting (refusals, yes-or-no questions), the probe fitted for each.
    `rows` are labelled by the model's own answers."""
    out = {}
    for refusals, yes_no in QUOTINGS:
        tried = replace(choice, quote_refusals=refusals, quote_yes_no=yes_no)
        labelled = as_served(rows, tried, refusal_probability)
        fitted = fit(labelled, tried)
        out[refusals, yes_no] = outcome(labelled, fitted.oof, fitted.threshold)
    return out


def chosen_quoting(outcomes: dict[tuple[bool, bool], Outcome]) -> tuple[bool, bool]:
    """Of the four ways of quoting, the one with the highest out-of-fold
    share of right answers at the refusal target on dev (a tie goes to the
    one that quotes less, the earlier in QUOTINGS)."""
    best = QUOTINGS[0]
    for way in QUOTINGS[1:]:
        if outcomes[way].accuracy > outcomes[best].accuracy + 1e-12:
            best = way
    return best


def nested(rows: Rows, choice: Choice) -> tuple[Array, list[float]]:
    """Each row's P(right) from the whole of `fit` run without its fold (the
    shipped probe's kind of model, scoring questions it was not fitted on),
    and each fold's threshold: whether the out-of-fold threshold carries to
    the probe that ships."""
    out = np.full(len(rows.meta), np.nan)
    thresholds = []
    for train, test in kfolds(rows):
        part = Rows([rows.meta[i] for i in train], rows.hidden[train])
        fitted = fit(part, choice)
        thresholds.append(fitted.threshold)
        held = Rows([rows.meta[i] for i in test], rows.hidden[test])
        out[test] = probability(fitted, held, choice.signals)
    return out, thresholds
