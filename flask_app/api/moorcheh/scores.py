"""Similarity scores as moorcheh-edge reports them: a number in [0, 1] rounded
to 6 decimals, and a relevance label.

Stored vectors and queries are unit length, so the raw score is a cosine in
[-1, 1]. `clip` maps it to max(0, cos) (an exact duplicate scores 1.0, an
orthogonal or opposite vector 0.0); `shift` maps it to (cos + 1) / 2.
"""

from __future__ import annotations

from typing import Any

from flask_app.store import Hit

# (lower bound, label), highest first: cut-offs are sqrt(0.8), sqrt(0.4),
# sqrt(0.2), sqrt(0.1), sqrt(0.05) and sqrt(0.01) rounded as the spec lists them.
LABELS = [
    (0.894, "Close Match"),
    (0.632, "Very High Relevance"),
    (0.447, "High Relevance"),
    (0.316, "Good Relevance"),
    (0.224, "Low Relevance"),
    (0.1, "Very Low Relevance"),
]
IRRELEVANT = "Irrelevant"


def to_score(cosine: float, mapping: str = "clip") -> float:
    value = (cosine + 1.0) / 2.0 if mapping == "shift" else cosine
    return round(min(1.0, max(0.0, value)), 6)


def label(score: float) -> str:
    for bound, name in LABELS:
        if score >= bound:
            return name
    return IRRELEVANT


def cosine_floor(score: float, mapping: str = "clip") -> float | None:
    """The smallest cosine whose reported score (rounded to 6 decimals) is at
    least `score`; None when every cosine passes."""
    if score <= 0:
        return None
    reported = score - 5e-7  # what rounds up to `score`
    return 2 * reported - 1 if mapping == "shift" else reported


def result(hit: Hit, mapping: str = "clip") -> dict[str, Any]:
    """A retrieved passage as moorcheh-edge reports it."""
    score = to_score(hit.score, mapping)
    out: dict[str, Any] = {"id": hit.id, "score": score, "label": label(score), "text": hit.text}
    if hit.metadata is not None:
        out["metadata"] = hit.metadata
    return out
