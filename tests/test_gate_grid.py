"""Scoring answer-gate thresholds from an ungated run (benches/gate_grid.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benches.gate_grid import (
    apply_gates,
    auc,
    calibrate,
    frontier,
    gated,
    outcome,
    separation,
)
from flask_app.inference.presets import PRESETS
from flask_app.rag.prompts import NO_CONTEXT_ANSWER

ROOT = Path(__file__).parents[1]


def row(
    set_: str, expected: bool, correct: bool, evidence: float, p: float, judge: float
) -> dict[str, Any]:
    return {
        "llm": "qwen2.5-coder-0.5b",
        "surface": "answer",
        "set": set_,
        "split": "dev",
        "answer": "an answer",
        "ttft_s": 0.5,
        "total_s": 2.0,
        "expected": ["x"] if expected else None,
        "correct": correct,
        "evidence_score": evidence,
        "refusal_probability": p,
        "answerable_probability": judge,
    }


ROWS = [
    row("a", True, True, 0.9, 0.01, 0.9),  # kept by any sane pair
    row("a", True, True, 0.3, 0.01, 0.4),  # the judge doubts it: cut at judge 0.5
    row("a", True, False, 0.8, 0.01, 0.9),  # wrong either way
    row("a", False, False, 0.5, 0.25, 0.3),  # invented: both gates catch it (0.25 > 0.2)
    row("b", True, True, 0.6, 0.15, 0.8),  # refused at 0.1 (0.15 > 0.1), kept at 0.2
    row("b", False, True, 0.7, 0.9, 0.2),  # the model declined by itself
]


def test_the_gates_cut_what_the_server_would() -> None:
    assert gated(ROWS[1], 1.0, 0.5) and not gated(ROWS[1], 1.0, 0.3)
    assert gated(ROWS[3], 0.1, 0.0) and not gated(ROWS[3], 0.5, 0.0)
    assert gated(ROWS[4], 0.1, 0.0) and not gated(ROWS[4], 0.2, 0.0)
    # a row without a judge reading is never cut by the judge
    assert not gated({**ROWS[1], "answerable_probability": None}, 1.0, 0.9)
    # the evidence score plays no part: only the model's own signals gate
    assert gated({**ROWS[3], "evidence_score": 1.0}, 0.1, 0.0)


def test_an_outcome_counts_answers_refusals_and_the_mean_over_sets() -> None:
    o = outcome(ROWS, 0.1, 0.5)
    assert (o.answered, o.answerable, o.refused, o.unanswerable) == (1, 4, 2, 2)
    # set a: 1/3 answered, 1/1 refused; set b: 0/1 answered, 1/1 refused
    assert o.mean_over_sets == pytest.approx(((1 / 3 + 1) / 2 + (0 + 1) / 2) / 2)
    off = outcome(ROWS, 1.0, 0.0)
    assert (off.answered, off.refused) == (3, 1)  # ungated: only the model's own refusal


def test_auc_separation_and_frontier() -> None:
    assert auc([3, 4], [1, 2]) == 1.0 and auc([1], [1]) == 0.5 and auc([1], [2]) == 0.0
    assert separation(ROWS)["judge P(no)"] == 1.0  # every unanswerable one judged lower
    grid = [outcome(ROWS, r, j) for r in (0.1, 0.2, 1.0) for j in (0.0, 0.5)]
    best = frontier(grid)
    assert [o.accuracy for o in best] == sorted((o.accuracy for o in best), reverse=True)
    assert [o.refusals for o in best] == sorted(o.refusals for o in best)
    for o in grid:  # nothing on the grid beats a frontier point on both counts
        assert not any(o.accuracy > b.accuracy and o.refusals > b.refusals for b in best)


def test_calibration_gives_up_little_accuracy_for_refusals() -> None:
    grid = [outcome(ROWS, r, j) for r in (0.1, 0.2, 1.0) for j in (0.0, 0.5)]
    ungated = outcome(ROWS, 1.0, 0.0)
    chosen = calibrate(grid, ungated)
    # judge 0.5 or refusal 0.1 cut correct answers; refusal 0.2 only the invented one
    assert (chosen.refusal, chosen.judge) == (0.2, 0.0)
    assert chosen.answered == ungated.answered and chosen.refused == 2


def test_applied_gates_answer_as_the_server_would() -> None:
    rows = apply_gates(ROWS, 0.2, 0.5)
    assert rows[0] == ROWS[0]  # kept as it was
    cut = rows[1]  # the judge doubted a correct answer: now a refusal, stopped at once
    assert cut["answer"] == NO_CONTEXT_ANSWER and cut["correct"] is False
    assert cut["fixed_sentence"] and cut["total_s"] == cut["ttft_s"]
    assert rows[3]["correct"] is True  # an invented answer cut: a correct refusal
    # scored ungated, the gated rows count what the gates would have
    now, then = outcome(rows, 1.0, 0.0), outcome(ROWS, 0.2, 0.5)
    assert (now.answered, now.refused, now.mean_over_sets) == (
        then.answered,
        then.refused,
        then.mean_over_sets,
    )


def grid_command(tmp_path: Path, ratio: float, judge: float, *extra: str) -> Any:
    """benches/gate_grid.py run on ROWS recorded with these gate settings."""
    run = tmp_path / "run.json"
    settings = {"qwen2.5-coder-0.5b": {"refusal_probability": ratio, "judge": judge}}
    run.write_text(json.dumps({"settings": settings, "answers": ROWS}))
    command = [sys.executable, "benches/gate_grid.py", str(run), *extra]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)


def test_the_command_refuses_a_gated_run(tmp_path: Path) -> None:
    done = grid_command(tmp_path, 0.1, 0.0)
    assert done.returncode == 2 and "ungated" in done.stderr
    done = grid_command(tmp_path, 1.0, 1e-6)
    assert done.returncode == 0, done.stderr
    assert "== qwen2.5-coder-0.5b" in done.stdout and "calibrated: judge" in done.stdout
    assert "judge P(no) 1.000" in done.stdout and "frontier" in done.stdout
    assert "the calibration rule picks: judge < 0.0  or refusal > 0.15" in done.stdout
    assert grid_command(tmp_path, 1.0, 1e-6, "--split", "test").returncode == 2  # no test rows


def test_the_command_writes_the_run_as_the_presets_would_gate_it(tmp_path: Path) -> None:
    done = grid_command(tmp_path, 1.0, 1e-6, "--gated-json", str(tmp_path / "gated.json"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "gated.json").read_text())
    calibration = PRESETS["qwen2.5-coder-0.5b"].calibration
    expected = apply_gates(ROWS, calibration.refusal_probability, calibration.judge)
    assert report["answers"] == expected
    assert report["settings"]["qwen2.5-coder-0.5b"]["refusal_probability"] == (
        calibration.refusal_probability
    )
