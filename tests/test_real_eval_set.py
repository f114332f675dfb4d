"""The evaluation command on a set kept outside the repository, with the real
default models: a long document is uploaded in pieces, its fact is found and
answered, and the report names the set by its directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benches.quality.rag_eval import is_refusal
from flask_app.inference.presets import DEFAULT_LLM
from flask_app.settings import Settings
from tests.test_eval_sets import write_set

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).parents[1]


def test_rag_eval_runs_a_held_out_set_given_by_its_path(
    real_settings: Settings, tmp_path: Path
) -> None:
    sections = [
        f"Hall {name}\n\nThe pump in the {name} hall is serviced by the {shift} shift."
        for name, shift in [
            ("north", "early"),
            ("south", "late"),
            ("east", "night"),
            ("west", "weekend"),
        ]
        * 12
    ]
    sections[30] = (
        "Hall annex\n\nThe annex pump is serviced by contractors from Vellmar Hydraulics."
    )
    manual = "\n\n".join(sections)
    assert len(manual) > 2000  # several upload pieces
    directory = write_set(
        tmp_path / "heldout",
        {
            "documents": [
                {"id": "kiosk", "text": "The kiosk's manager is Dana Ortiz."},
                {"id": "manual", "text": manual},
            ]
        },
        {
            "questions": [
                {"q": "Who manages the kiosk?", "expect": ["Dana Ortiz"]},
                {"q": "Which company services the annex pump?", "expect": ["Vellmar"]},
                {"q": "What is the boiling point of mercury?", "expect": None},
            ]
        },
    )
    out = tmp_path / "report.json"
    env = {**os.environ, "EDGERAG_MODEL_DIR": str(real_settings.model_dir)}
    command = [sys.executable, "benches/quality/rag_eval.py", "--sets", str(directory)]
    command += ["--llms", DEFAULT_LLM]
    run = subprocess.run(
        [*command, "--surfaces", "answer", "--json", str(out), "--quiet"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    rows = {r["question"]: r for r in report["answers"]}
    assert {r["set"] for r in rows.values()} == {"heldout"}
    assert {r["split"] for r in rows.values()} == {"test"}  # no split given: held out
    # graded as the report says: right, or (the 0.5B's verifier is unsure of
    # it over this store) declined, never another answer
    kiosk = rows["Who manages the kiosk?"]
    assert kiosk["correct"] == ("Dana Ortiz" in kiosk["answer"]), kiosk
    assert kiosk["correct"] or not kiosk["found"], kiosk
    annex = rows["Which company services the annex pump?"]
    # the one passage of 48 that says so reaches the prompt; whether the 0.5B's
    # probe then lets the answer through depends on the host's llama.cpp
    # kernels near its threshold (an earlier probe gave 0.461 against 0.465 on
    # an AVX2-only AMD EPYC, above it on an Intel host), so only the grading
    # is held here
    assert annex["recalled"], annex
    assert annex["correct"] == ("Vellmar" in annex["answer"]), annex
    # an unanswerable question is scored correct exactly when the answer declines
    # (the default model may answer this one from what it knows: docs/limits.md)
    mercury = rows["What is the boiling point of mercury?"]
    assert mercury["correct"] == is_refusal(mercury["answer"]), mercury
    result = report["results"][DEFAULT_LLM]["heldout/test"]
    assert result["answerable"] == 2 and result["unanswerable"] == 1
    assert result["accuracy"] == (kiosk["correct"] + annex["correct"]) / 2
    assert result["correct_refusals"] == float(mercury["correct"])
