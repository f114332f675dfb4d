"""Serving, simulated on the rows: what the server would answer with a
model, a number of samples, an accept point and a threshold, and the
threshold that meets the decline targets on dev."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benches.quality.verifier_model import Model, Probe, stage_one
from benches.quality.verifier_rows import Array, Rows
from flask_app.rag.choice import pooled

# the share of unanswerable dev questions declined that the threshold must
# reach on every family (the targets, and a margin for test)
TARGETS = {
    "qwen2.5-coder-0.5b": {"squad": 0.85, "sets": 0.80},
    "qwen2.5-coder-1.5b": {"squad": 0.90, "sets": 0.90},
}
MARGIN = 0.02


@dataclass(frozen=True)
class Outcome:
    answerable: int
    right: int
    wrong: int  # of the answerable ones, answered wrong
    unanswerable: int
    declined: int  # of the unanswerable ones

    @property
    def right_share(self) -> float:
        return self.right / max(1, self.answerable)

    @property
    def wrong_share(self) -> float:
        return self.wrong / max(1, self.answerable)

    @property
    def declined_share(self) -> float:
        return self.declined / max(1, self.unanswerable)


def choices(
    rows: Rows, model: Model | Probe, llm: str, samples: int, accept: float | None
) -> list[tuple[float | None, str | None]]:
    """Per question, as served (`rag.choice.pooled`): (the chosen answer's
    P(right), its grade); (None, None) when every candidate was a refusal."""
    if isinstance(model, Probe):
        model = stage_one(model)
    p, qs, cs = model.probabilities(rows, llm, samples)
    by_question: dict[int, list[tuple[int, float]]] = {}
    for qi, ci, pi in zip(qs, cs, p, strict=True):
        by_question.setdefault(int(qi), []).append((int(ci), float(pi)))
    out: list[tuple[float | None, str | None]] = []
    for qi, row in enumerate(rows.questions):
        scored = by_question.get(qi, [])
        greedy = next((pi for ci, pi in scored if ci == 0), None)
        if accept is not None and greedy is not None and greedy >= accept:
            scored = [(0, greedy)]
        cands = row["candidates"]
        chosen = pooled([(ci, cands[ci]["text"].strip(), pi) for ci, pi in scored])
        if chosen is None:
            out.append((None, None))
            continue
        ci, pi = chosen
        out.append((pi, cands[ci]["grade"]))
    return out


def outcome(
    rows: Rows, chosen: Sequence[tuple[float | None, str | None]], threshold: float
) -> Outcome:
    answerable = right = wrong = unanswerable = declined = 0
    for row, (p, grade) in zip(rows.questions, chosen, strict=True):
        answered = p is not None and p >= threshold
        if row["expected"] is None:
            unanswerable += 1
            declined += not answered
        else:
            answerable += 1
            right += answered and grade == "right"
            wrong += answered and grade != "right"
    return Outcome(answerable, right, wrong, unanswerable, declined)


def threshold_for(
    llm: str, devs: dict[str, Rows], chosen: dict[str, list[tuple[float | None, str | None]]]
) -> float | None:
    """The lowest threshold declining at least the target (+ margin) of every
    family's unanswerable dev questions (None: none does)."""
    values = sorted({p for picks in chosen.values() for p, _ in picks if p is not None})
    for t in [0.0, *values, 1.0 + 1e-9]:
        if all(
            outcome(devs[f], chosen[f], t).declined_share >= TARGETS[llm][f] + MARGIN for f in devs
        ):
            return t
    return None


def dev_right(devs: dict[str, Rows], chosen: dict[str, Any], t: float) -> dict[str, Outcome]:
    return {f: outcome(devs[f], chosen[f], t) for f in devs}


def reliability(p: Array, right: Array) -> list[str]:
    lines = []
    for lo in np.arange(0.0, 1.0, 0.2):
        sel = (p >= lo) & (p < lo + 0.2 + (1e-9 if lo >= 0.8 else 0))
        if sel.sum():
            lines.append(
                f"  P {lo:.1f}-{lo + 0.2:.1f}: {int(sel.sum()):5} answers, "
                f"{right[sel].mean():.0%} right (mean P {p[sel].mean():.2f})"
            )
    return lines
