"""`edgerag doctor`: a healthy install passes; an AMX build on a kernel
without AMX, a SIGILL in the model run and missing models are each reported
with their fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flask_app.cli import doctor
from flask_app.settings import Settings

AMX_INFO = b"CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | "


def test_an_amx_build_on_a_kernel_without_amx_is_refused(monkeypatch: Any) -> None:
    import llama_cpp

    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: AMX_INFO)
    monkeypatch.setattr(doctor, "kernel_cpu_flags", lambda: {"avx512f", "avx512_vnni"})
    check = doctor.llama_build()
    assert not check.ok and "SIGILL" in check.detail
    assert "-mno-amx-tile" in check.fix and "llama-cpp-python==0.3.36" in check.fix
    # the same build where the kernel enables AMX is fine
    monkeypatch.setattr(doctor, "kernel_cpu_flags", lambda: {"amx_tile", "amx_int8"})
    assert doctor.llama_build().ok


def test_a_model_run_killed_by_sigill_is_reported_with_the_fix(
    monkeypatch: Any, tmp_path: Path
) -> None:
    monkeypatch.setattr(doctor, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGILL)")
    check = doctor.model_run(Settings.load({"data_dir": tmp_path}, {}))
    assert not check.ok and "SIGILL" in check.detail and "-mno-amx-tile" in check.fix


def test_missing_models_say_pull(tmp_path: Path) -> None:
    settings = Settings.load({"data_dir": tmp_path / "d", "model_dir": tmp_path / "m"}, {})
    lines: list[str] = []
    assert doctor.run(settings, lines.append) == 1
    text = "\n".join(lines)
    assert "FAIL LLM" in text and "fix: edgerag pull" in text
    assert "model run" not in text  # nothing to run


@pytest.mark.real_model
def test_this_installation_passes(real_settings: Settings, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "flask_app.cli",
            "doctor",
            "--data-dir",
            str(tmp_path),
            "--model-dir",
            str(real_settings.model_dir),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   model run" in done.stdout and "edgerag can serve" in done.stdout
