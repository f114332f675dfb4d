"""`edgerag doctor`: checks that this installation can serve, each with the
fix when it cannot. The one that matters most for a `pip install`: a
llama.cpp built with AMX for a machine whose kernel does not enable AMX dies
with SIGILL on its first matrix product, so the build's features are read,
and the models are loaded and run once in a child process whose death by a
signal is reported instead of taking the doctor down.
"""

from __future__ import annotations

import importlib.metadata
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flask_app.settings import Settings

LLAMA_VERSION = "0.3.36"
AMX_SAFE_INSTALL = (
    "CMAKE_ARGS=\"-DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' "
    "-DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'\" "
    f"pip install --force-reinstall --no-cache-dir --no-deps llama-cpp-python=={LLAMA_VERSION}"
)
PROBE_TIMEOUT_S = 180


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def kernel_cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def llama_build() -> Check:
    try:
        version = importlib.metadata.version("llama-cpp-python")
        import llama_cpp
    except (importlib.metadata.PackageNotFoundError, ImportError) as exc:
        return Check(
            "llama.cpp", False, f"llama-cpp-python is not importable: {exc}", AMX_SAFE_INSTALL
        )
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    features = {
        name.strip(): value.strip() == "1"
        for part in info.replace("CPU :", "").split("|")
        if "=" in part
        for name, value in [part.split("=", 1)]
    }
    if version != LLAMA_VERSION:
        return Check(
            "llama.cpp",
            False,
            f"llama-cpp-python {version}; edgerag is tested with {LLAMA_VERSION}",
            AMX_SAFE_INSTALL,
        )
    amx_built = any(on for name, on in features.items() if name.startswith("AMX"))
    if amx_built and "amx_tile" not in kernel_cpu_flags():
        return Check(
            "llama.cpp",
            False,
            "built with AMX, which this machine's kernel does not enable: "
            "the first model call would die with SIGILL",
            AMX_SAFE_INSTALL,
        )
    shown = " ".join(name for name, on in features.items() if on)
    return Check("llama.cpp", True, f"llama-cpp-python {version} ({shown})")


def simcore_kernels() -> Check:
    try:
        from flask_app import simcore
    except ImportError as exc:
        return Check("simcore", False, f"not importable: {exc}", "reinstall the edgerag wheel")
    return Check(
        "simcore",
        True,
        f"SIMD level {simcore.simd_level()}, popcount {simcore.popcount_kernel()}",
    )


def model_files(settings: Settings) -> list[Check]:
    checks = []
    chosen = settings.llm_preset()
    llm = f"LLM {chosen.name}" if chosen is not None else "LLM"
    fix = f"edgerag pull --llm {chosen.name}" if chosen is not None else "edgerag pull"
    for name, path in ((llm, settings.llm_path()), ("embedder", settings.embed_path())):
        if path.is_file():
            checks.append(Check(name, True, f"{path} ({path.stat().st_size / 1e6:.0f} MB)"))
        else:
            checks.append(Check(name, False, f"{path} is missing", fix))
    return checks


def answer_gate(settings: Settings) -> Check:
    """Which gate will check answers: the preset's verifier when it was
    trained on this very GGUF, else none (unverified answers; not a failure)."""
    from flask_app.rag.verifier import VerifierError, choose_gate

    chosen = settings.llm_preset()
    try:
        gate = choose_gate(
            chosen.name if chosen else None,
            settings.llm_path(),
            settings.verifier_threshold(),
            off=settings.verifier_off(),
        )
    except VerifierError as exc:
        return Check("answer gate", False, str(exc), "reinstall the edgerag wheel")
    verifier = gate.verifier
    if verifier is not None:
        name = verifier.path.name if verifier.path else "verifier"
        return Check(
            "answer gate",
            True,
            f"verifier {name} (layer {verifier.layer}, {verifier.samples} samples, "
            f"threshold {gate.threshold:.3g}"
            + ("" if verifier.skip_below is None else f", floor {verifier.skip_below:.3g}")
            + ")",
        )
    refusal = settings.calibration().refusal_probability
    return Check("answer gate", True, f"unverified, refusal gate {refusal}: {gate.reason}")


def data_dir(settings: Settings) -> Check:
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        probe = settings.data_dir / ".doctor-write-test"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        return Check("data dir", False, f"{settings.data_dir}: {exc}", "pass --data-dir DIR")
    return Check("data dir", True, f"{settings.data_dir} is writable")


_PROBE = """
import sys
from pathlib import Path
from flask_app.inference.embed import LlamaEmbedder
from flask_app.inference.llama_backend import LlamaBackend
from flask_app.inference.llm import LLM, Sampling
embedder = LlamaEmbedder(Path(sys.argv[1]), batched=False)
assert embedder.embed(["a short text"]).shape == (1, embedder.dim)
llm = LLM(LlamaBackend(Path(sys.argv[2]), n_ctx=512, n_seq=1))
print(repr(llm.chat([{"role": "user", "content": "Say ok."}], max_tokens=2,
                    sampling=Sampling(temperature=0.0))))
"""


def model_run(settings: Settings) -> Check:
    """Load both models and run each once, in a child process."""
    command = [sys.executable, "-c", _PROBE, str(settings.embed_path()), str(settings.llm_path())]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Check("model run", False, f"no answer within {PROBE_TIMEOUT_S} s")
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        fix = AMX_SAFE_INSTALL if name == "SIGILL" else ""
        return Check(
            "model run",
            False,
            f"the models died with {name} (an instruction this CPU cannot run)",
            fix,
        )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        return Check("model run", False, last)
    return Check("model run", True, "embedded a text and generated with llama.cpp")


def run(settings: Settings, out: Callable[[str], None] = print) -> int:
    checks = [llama_build(), simcore_kernels(), data_dir(settings), *model_files(settings)]
    if all(c.ok for c in checks):
        checks.append(answer_gate(settings))
        checks.append(model_run(settings))
    for check in checks:
        out(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
        if check.fix:
            out(f"     fix: {check.fix}")
    failed = [c for c in checks if not c.ok]
    out("edgerag can serve on this machine" if not failed else f"{len(failed)} problem(s)")
    return 1 if failed else 0
