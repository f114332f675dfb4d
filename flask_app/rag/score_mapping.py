"""Reported scores in [0, 1] and back: the `--score-mapping` setting.

Stored vectors and queries are unit length, so the raw score is a cosine in
[-1, 1]. `clip` maps it to max(0, cos) (an exact duplicate scores 1.0, an
orthogonal or opposite vector 0.0); `shift` maps it to (cos + 1) / 2.
"""

from __future__ import annotations


def to_score(cosine: float, mapping: str = "clip") -> float:
    value = (cosine + 1.0) / 2.0 if mapping == "shift" else cosine
    return round(min(1.0, max(0.0, value)), 6)


def cosine_floor(score: float, mapping: str = "clip") -> float | None:
    """The smallest cosine whose reported score (rounded to 6 decimals) is at
    least `score`; None when every cosine passes."""
    if score <= 0:
        return None
    reported = score - 5e-7  # what rounds up to `score`
    return 2 * reported - 1 if mapping == "shift" else reported
