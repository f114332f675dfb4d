"""Similarity scores as moorcheh-edge reports them: a number in [0, 1] rounded
to 6 decimals (`rag.score_mapping`), and a relevance label."""

from __future__ import annotations

from typing import Any

from flask_app.rag.score_mapping import to_score
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


def label(score: float) -> str:
    for bound, name in LABELS:
        if score >= bound:
            return name
    return IRRELEVANT


def result(hit: Hit, mapping: str = "clip") -> dict[str, Any]:
    """A retrieved passage as moorcheh-edge reports it."""
    score = to_score(hit.score, mapping)
    out: dict[str, Any] = {"id": hit.id, "score": score, "label": label(score), "text": hit.text}
    if hit.metadata is not None:
        out["metadata"] = hit.metadata
    return out
