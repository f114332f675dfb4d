"""Verifier files for tests with the scripted model: its hidden state is a
short vector the test scripts, so a one-weight probe reads it."""

from __future__ import annotations

from typing import Any

from flask_app.rag import verifier


def verifier_dict(
    *,
    weight: float = 4.0,
    threshold: float = 0.5,
    samples: int = 3,
    accept: float | None = None,
    skip_below: float | None = None,
    answerable: bool = False,
    candidate_tokens: int = 32,
    layer: int = 3,
) -> dict[str, Any]:
    """A verifier over a 1-float state: P(right) = sigmoid(weight * state)."""
    out: dict[str, Any] = {
        "format": verifier.FORMAT,
        "preset": "scripted",
        "gguf_sha256": "0" * 64,
        "correct": {"layer": layer, "reads": "last", "weights": [weight], "bias": 0.0},
        "combine": {"weights": {"correct": 1.0}, "bias": 0.0, "fill": {}},
        "policy": {
            "threshold": threshold,
            "samples": samples,
            "temperature": 1.0,
            "candidate_tokens": candidate_tokens,
            "accept": accept,
            "skip_below": skip_below,
        },
    }
    if answerable:
        out["answerable"] = {"layer": layer, "reads": "prompt", "weights": [weight], "bias": 0.0}
        out["combine"]["weights"]["answerable"] = 0.0
    return out


def scripted_verifier(**options: Any) -> verifier.Verifier:
    return verifier.Verifier.from_dict(verifier_dict(**options))
