"""Process-wide llama.cpp plumbing shared by the LLM and the embedder."""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path
from typing import Any

import llama_cpp

_log = logging.getLogger("edgerag.llama")
_installed: list[Any] = []  # keeps the C callback alive for the process lifetime
GGML_LOG_LEVEL_ERROR = 4  # enum ggml_log_level (ggml.h)

# llama.cpp file types (enum llama_ftype) by the names users know.
FILE_TYPES = {
    0: "f32",
    1: "f16",
    2: "q4_0",
    3: "q4_1",
    7: "q8_0",
    8: "q5_0",
    9: "q5_1",
    10: "q2_k",
    12: "q3_k_m",
    14: "q4_k_s",
    15: "q4_k_m",
    16: "q5_k_s",
    17: "q5_k_m",
    18: "q6_k",
    32: "bf16",
}


def available_cores() -> int:
    """Cores this process may run on (respects affinity masks and cgroup pinning)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def route_llama_logs() -> None:
    """Send llama.cpp's C-side log lines to Python logging instead of stderr."""
    if _installed:
        return

    def forward(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        message = text.decode("utf-8", errors="replace").rstrip()
        if message:
            # ggml's errors name the cause of a failed decode: kept in the log
            _log.log(logging.ERROR if level == GGML_LOG_LEVEL_ERROR else logging.DEBUG, message)

    callback = llama_cpp.llama_log_callback(forward)
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    _installed.append(callback)


def model_id_from_metadata(metadata: dict[str, str], path: Path) -> str:
    """An honest id: the GGUF's `general.name` plus its file type, e.g.
    `qwen2.5-coder-0.5b-instruct-awq:q4_0`; the file name when unnamed."""
    name = metadata.get("general.name", "").strip()
    if not name:
        return path.stem
    slug = "-".join(name.lower().split())
    file_type = metadata.get("general.file_type")
    if file_type is not None and file_type.isdigit() and int(file_type) in FILE_TYPES:
        return f"{slug}:{FILE_TYPES[int(file_type)]}"
    return slug


def renew_context(llama: Any) -> None:
    """Give `llama` (a `llama_cpp.Llama`) a fresh context made from its
    `context_params` as they are now (a callback, more sequences); the
    context it had is freed. The KV cache is empty afterwards, as after
    loading."""
    from llama_cpp import _internals

    fresh = _internals.LlamaContext(
        model=llama._model, params=llama.context_params, verbose=llama.verbose
    )
    old, llama._ctx = llama._ctx, fresh
    old.close()
    llama._stack.callback(fresh.close)
    llama.n_tokens = 0
