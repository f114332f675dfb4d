"""The model's hidden state at the prompt's last token, read during the
answer's own prefill.

llama.cpp computes each layer's output for every prompt token and keeps
none of them; its scheduler calls an evaluation callback (`cb_eval`, set
when a context is made) for every graph node, asking whether the caller
wants that node's result. `HiddenStateTap` answers yes for the named layer
outputs it is armed with (`l_out-N`: block N's output; `result_norm`: the
final normalised state the output head reads) and copies the last row —
the last token of the batch — when the scheduler hands the result over.
No second pass and no extra logits: embedding mode would make llama.cpp
compute the logits of every prompt token (`benches/answer_probe.py`
measures what the tap costs).
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from flask_app.inference.llama_runtime import renew_context

FINAL = -1  # the layer number of the final normalised state

_lib: Any = None
_lib_lock = threading.Lock()


class _TensorHead(ctypes.Structure):
    """The leading fields of `struct ggml_tensor` (ggml.h): type, buffer, ne, nb."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
    ]


_GGML_TYPE_F32 = 0


def _ggml() -> Any:
    """ggml's base library as loaded by llama-cpp-python (same process, same copy)."""
    global _lib
    with _lib_lock:
        if _lib is None:
            import llama_cpp

            lib = ctypes.CDLL(
                os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so")
            )
            lib.ggml_get_name.restype = ctypes.c_char_p
            lib.ggml_get_name.argtypes = [ctypes.c_void_p]
            lib.ggml_backend_tensor_get.restype = None
            lib.ggml_backend_tensor_get.argtypes = [
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_size_t,
            ]
            _lib = lib
        return _lib


def tensor_name(layer: int) -> str:
    """llama.cpp's name for a layer's output (`FINAL`: the normalised state)."""
    return "result_norm" if layer == FINAL else f"l_out-{layer}"


class HiddenStateTap:
    """Copies the last token's row of armed layer outputs as llama.cpp computes them.

    `arm(layers)` before a decode, `take()` after it; while disarmed the
    callback answers "no" at once. `callback` must outlive the context it is
    installed in (see `install`).
    """

    def __init__(self) -> None:
        self._ggml = _ggml()
        self._wanted: dict[bytes, int] = {}
        self._states: dict[int, npt.NDArray[np.float32]] = {}
        import llama_cpp

        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_node)

    def arm(self, layers: tuple[int, ...]) -> None:
        """Copy the last token's row of each of `layers` from now on."""
        self._states = {}
        self._wanted = {tensor_name(layer).encode(): layer for layer in layers}

    def take(self) -> dict[int, npt.NDArray[np.float32]]:
        """The rows copied since `arm`, by layer; disarms."""
        states, self._states, self._wanted = self._states, {}, {}
        return states

    def _on_node(self, tensor: int | None, ask: bool, _user_data: int | None) -> bool:
        if not self._wanted or tensor is None:
            return False
        layer = self._wanted.get(self._ggml.ggml_get_name(tensor))
        if layer is None:
            return False
        if ask:
            return True
        head = _TensorHead.from_address(tensor)
        width, rows = int(head.ne[0]), int(head.ne[1])
        if head.type != _GGML_TYPE_F32 or rows < 1:
            return True
        row = np.empty(width, dtype=np.float32)
        # the batch's last token is the last row (a layer keeps one row per token)
        self._ggml.ggml_backend_tensor_get(
            tensor, row.ctypes.data, (rows - 1) * int(head.nb[1]), row.nbytes
        )
        self._states[layer] = row
        return True


def install(llama: Any, tap: HiddenStateTap) -> None:
    """Give `llama` (a `llama_cpp.Llama`) a fresh context whose scheduler calls
    `tap` for every node; the context it had is freed. The KV cache is empty
    afterwards, as after loading."""
    params = llama.context_params
    params.cb_eval = tap.callback
    params.cb_eval_user_data = None
    renew_context(llama)
