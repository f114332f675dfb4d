"""The compiler flags scripts/setup.sh builds llama.cpp with, per architecture:
AMX off on x86-64 only, and nothing an aarch64 compiler rejects."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
FLAGS = ROOT / "scripts" / "llama_flags.sh"


def flags(arch: str) -> list[str]:
    out = subprocess.run([str(FLAGS), arch], capture_output=True, text=True, check=True)
    return out.stdout.split()


def compiles(compiler: str, options: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "empty.c"
    source.write_text("int edgerag(void) { return 0; }\n")
    return subprocess.run(
        [compiler, *options, "-c", str(source), "-o", str(tmp_path / "empty.o")],
        capture_output=True,
        text=True,
    )


def aarch64_compiler() -> str:
    """An aarch64 gcc: the cross compiler on x86-64 (scripts/setup.sh --dev installs it)."""
    name = "gcc" if platform.machine() == "aarch64" else "aarch64-linux-gnu-gcc"
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing; run scripts/setup.sh --dev")
    return found


def test_x86_64_switches_amx_off() -> None:
    assert flags("x86_64") == ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"]


def test_aarch64_flags_are_accepted_by_an_aarch64_compiler(tmp_path: Path) -> None:
    chosen = flags("aarch64")
    assert not any("amx" in f for f in chosen)
    result = compiles(aarch64_compiler(), chosen, tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_x86_flags_would_break_an_aarch64_build(tmp_path: Path) -> None:
    """Why the choice matters: the aarch64 compiler stops at the first AMX flag."""
    result = compiles(aarch64_compiler(), flags("x86_64"), tmp_path)
    assert result.returncode != 0 and "amx" in result.stderr


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the host compiler is not x86-64")
def test_x86_64_flags_are_accepted_by_this_machines_compiler(tmp_path: Path) -> None:
    result = compiles("gcc", flags("x86_64"), tmp_path)
    assert result.returncode == 0, result.stderr
