"""benches/quality/frontier.py reads an open-gate run at any threshold as
serving at that threshold would have counted it."""

from __future__ import annotations

from typing import Any

import pytest

from benches.quality.frontier import frontiers, outcome, point


def row(expected: str | None, correct: bool, found: bool, p: float | None) -> dict[str, Any]:
    return {
        "llm": "m",
        "surface": "answer",
        "family": "sets",
        "split": "dev",
        "expected": expected,
        "correct": correct,
        "found": found,
        "answerable_probability": p,
    }


def test_below_the_threshold_or_refused_is_declined() -> None:
    assert outcome(row("12", True, True, 0.7), 0.5) == "right"
    assert outcome(row("12", True, True, 0.4), 0.5) == "declined"
    assert outcome(row("12", False, True, 0.9), 0.5) == "wrong"
    assert outcome(row("12", False, False, 0.9), 0.5) == "declined"  # the model's refusal
    assert outcome(row(None, False, True, 0.6), 0.5) == "wrong"  # an answer to the unanswerable
    assert outcome(row(None, False, True, 0.3), 0.5) == "declined"
    assert outcome(row(None, True, False, None), 0.0) == "declined"


def test_a_point_counts_right_and_wrong_of_the_answerable_and_declines_of_the_rest() -> None:
    rows = [
        row("a", True, True, 0.9),
        row("b", True, True, 0.45),
        row("c", False, True, 0.6),
        row("d", False, True, 0.2),
        row(None, False, True, 0.55),
        row(None, False, True, 0.3),
    ]
    assert point(rows, 0.5) == {"right": 0.25, "wrong": 0.25, "declined": 0.5}
    assert point(rows, 0.0) == {"right": 0.5, "wrong": 0.5, "declined": 0.0}


def test_the_served_threshold_is_one_of_the_points() -> None:
    report = {
        "settings": {"m": {"verifier_threshold": 0.507, "open_gate": True}},
        "answers": [row("a", True, True, 0.51), row(None, False, True, 0.506)],
    }
    points = frontiers(report)["m"]["sets/dev"]
    served = [p for p in points if p["served"]]
    assert served == [
        {"threshold": 0.507, "served": True, "right": 1.0, "wrong": 0.0, "declined": 1.0}
    ]
    assert [p["threshold"] for p in points] == sorted(p["threshold"] for p in points)
    assert pytest.approx(points[0]["threshold"]) == 0.05


def test_an_opened_gate_keeps_its_verifier_and_its_floor_at_threshold_zero() -> None:
    from benches.quality.rag_eval import opened
    from flask_app.rag.verifier import Gate
    from tests.verifiers import scripted_verifier

    shipped = Gate(scripted_verifier(samples=1, skip_below=0.3), threshold=0.5)
    gate = opened(shipped)
    assert gate.threshold == 0.0 and gate.verifier is not None
    assert gate.verifier.skip_below == 0.3 and gate.verifier.samples == 1
    with pytest.raises(SystemExit, match="needs a verifier"):
        opened(Gate(None, reason="off"))
