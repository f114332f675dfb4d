"""A process that loaded the models frees them before the interpreter's
teardown: left to `Llama.__del__` there, `llama_free` crashed a finished
`rag_eval.py` now and then (exit -11 on a busy host)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flask_app.settings import Settings

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[1]

# registered before anything else, this atexit handler runs after every
# later one: it sees what is left for the teardown
SCRIPT = """
import atexit, sys, threading
state = {}
def report():
    ctx = state["llm"]._llama._ctx.ctx
    engines = [t for t in threading.enumerate() if t.name == "llm-engine" and t.is_alive()]
    embedder = state["embedder"]._llama._model.model
    print(f"context {ctx is None} engine {not engines} embedder {embedder is None}", flush=True)
atexit.register(report)
from pathlib import Path
from flask_app.inference.embed import LlamaEmbedder
from flask_app.inference.llama_backend import LlamaBackend
from flask_app.inference.llm import LLM, Ask
state["llm"] = LlamaBackend(Path(sys.argv[1]), n_ctx=1024, n_seq=2)
state["embedder"] = LlamaEmbedder(Path(sys.argv[2]))
text = LLM(state["llm"]).chat([{"role": "user", "content": "Say hi."}], max_tokens=4)
state["embedder"].embed(["hi"])
print("answered", bool(text), flush=True)
"""


def test_the_models_are_freed_before_the_interpreters_teardown(real_settings: Settings) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(real_settings.llm_path()),
            str(real_settings.embed_path()),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "answered True" in run.stdout, run.stdout
    assert "context True engine True embedder True" in run.stdout, run.stdout
