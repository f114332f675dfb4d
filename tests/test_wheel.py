"""The installable wheel: `maturin build --release` produces a wheel that
installs into a fresh virtual environment (llama-cpp-python from the
AMX-safe wheel the setup built, as the README tells pip users), where
`edgerag doctor`, `edgerag pull` and `edgerag serve` work with the real models
and the page, the API and the docs are served from the installed package."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from flask_app.cli.doctor import LLAMA_VERSION
from flask_app.settings import Settings
from tests.http_client import free_port

pytestmark = pytest.mark.real_model
ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], cwd: Path, timeout: float = 900) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_installs_and_serves(real_settings: Settings, tmp_path: Path) -> None:
    maturin = Path(sys.executable).parent / "maturin"
    _run([str(maturin), "build", "--release", "-q", "-o", str(tmp_path / "dist")], ROOT)
    (wheel,) = (tmp_path / "dist").glob("edgerag-*.whl")
    wheels = real_settings.cache_dir / "wheels" / "llama-cpp-python-noamx"
    # the pinned version's: an upgrade leaves the previous wheel beside it
    llama = sorted(wheels.glob(f"llama_cpp_python-{LLAMA_VERSION}-*.whl"))
    assert llama, "the AMX-safe llama-cpp-python wheel is built by scripts/setup.sh"
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    _run([*pip, "install", str(llama[-1])], tmp_path)
    _run([*pip, "install", str(wheel)], tmp_path)
    edgerag = str(venv / "bin" / "edgerag")
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import flask_app; print(flask_app.__file__)"],
        tmp_path,
    )
    assert where.startswith(str(venv)), where  # the installed package, not the checkout

    dirs = [
        "--model-dir",
        str(real_settings.model_dir),
        "--cache-dir",
        str(real_settings.cache_dir),
    ]
    assert "embedder:" in _run([edgerag, "pull", *dirs], tmp_path)
    data = ["--data-dir", str(tmp_path / "data"), "--model-dir", str(real_settings.model_dir)]
    assert "edgerag can serve" in _run([edgerag, "doctor", *data], tmp_path)

    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(
        [edgerag, "serve", "--port", str(port), *data],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": ""},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        health = None
        while health is None:
            assert time.monotonic() < deadline, "the installed server did not answer in 120 s"
            try:
                health = requests.get(base + "/health", timeout=2).json()
            except requests.ConnectionError:
                assert server.poll() is None, (tmp_path / "serve.log").read_text()
                time.sleep(0.2)
        assert health["llm"]["id"].startswith("qwen2.5") and health["embedder"]["dimension"] == 384
        chat = requests.post(
            base + "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "Say yes."}],
                "max_tokens": 3,
            },
            timeout=60,
        ).json()
        assert chat["choices"][0]["message"]["content"].strip()
        assert "edgerag" in requests.get(base + "/", timeout=5).text
        assert requests.get(base + "/ui/app.js", timeout=5).status_code == 200
        assert requests.get(base + "/openapi.json", timeout=5).json()["openapi"] == "3.1.0"
    finally:
        server.terminate()
        server.wait(30)
        log.close()
