"""benches/eval_diff.py: two evaluation runs against each other, an ungated
run read as the presets' gates would have answered it."""

from __future__ import annotations

from typing import Any

from benches.eval_diff import report
from flask_app.inference.presets import DEFAULT_LLM, PRESETS


def row(question: str, answer: str, correct: bool, expected: bool, p: float) -> dict[str, Any]:
    return {
        "llm": DEFAULT_LLM,
        "surface": "answer",
        "set": "own",
        "question": question,
        "expected": ["x"] if expected else None,
        "answer": answer,
        "correct": correct,
        "answerable_probability": p,
        "refusal_probability": 0.01,
    }


def run(rows: list[dict[str, Any]], ungated: bool) -> dict[str, Any]:
    gate = {"probe_threshold": 1e-9 if ungated else 0.5, "probe_fitted_threshold": 0.5}
    return {"settings": {DEFAULT_LLM: gate}, "answers": rows}


def test_an_ungated_run_is_read_at_the_fitted_threshold() -> None:
    before = [
        row("a?", "x.", True, True, 0.9),  # right and passes
        row("b?", "x.", True, True, 0.2),  # right, but the probe declines it
        row("c?", "y.", False, False, 0.1),  # invented, declined by the probe
        row("d?", "y.", False, False, 0.8),  # invented and let through
    ]
    after = [dict(r) for r in before]
    after[1] |= {"answerable_probability": 0.7, "answer": "x!"}
    after[3] |= {"answerable_probability": 0.3, "answer": "z."}
    lines = report(run(before, True), run(after, True), None)
    assert f"{DEFAULT_LLM} all: right 1 → 2 of 2, declined 1 → 2 of 2" in lines
    # only the changed answers are listed, each with its probability
    assert "  [own] b? (expected ['x'])" in lines and "    after: P 0.70, 'x!'" in lines
    assert not any("a?" in line for line in lines)
    # a run whose gates acted is taken as it is
    lines = report(run(before, False), run(before, False), ["own"])
    assert f"{DEFAULT_LLM} own: right 2 → 2 of 2, declined 0 → 0 of 2" in lines
    # the first token's refusal gate counts too
    refusing = PRESETS[DEFAULT_LLM].calibration.refusal_probability + 0.1
    after[0] |= {"refusal_probability": refusing}
    lines = report(run(before, True), run(after, True), None)
    assert f"{DEFAULT_LLM} all: right 1 → 1 of 2, declined 1 → 2 of 2" in lines
