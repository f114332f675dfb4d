"""The model's hidden states, read during the decodes that happen anyway.

llama.cpp computes each layer's output for every token and keeps none of
them; its scheduler calls an evaluation callback (`cb_eval`, set when a
context is made) for every graph node, asking whether the caller wants that
node's result. `HiddenStateTap` answers yes for the named layer outputs it
is armed with (`l_out-N`: block N's output; `result_norm`: the final
normalised state the output head reads) and copies the rows it was asked
for — the prompt's last token, each answer's newest token — when the
scheduler hands the result over. No second pass and no extra logits
(`benches/answer_probe.py` measured what the tap costs).
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
    """Copies chosen rows of armed layer outputs as llama.cpp computes them.

    `arm(layers, rows, outputs, n_ubatch)` before a `llama_decode`: `rows`
    are batch positions whose state is wanted; `take()` after it returns
    them by layer and position, and disarms. llama.cpp computes a batch in
    ubatches of `n_ubatch` tokens, in order (one stream: a unified KV
    cache), and calls back once per ubatch and layer; a block's output has a
    row per token of the ubatch, except the last block's and the final
    norm's, which keep only the output tokens' rows (`outputs`: which
    positions ask for logits). While disarmed the callback answers "no" at
    once. `callback` must outlive the context it is installed in.
    """

    def __init__(self) -> None:
        self._ggml = _ggml()
        self._wanted: dict[bytes, int] = {}
        self._rows: list[int] = []
        self._outputs: list[bool] = []
        self._n_ubatch = 1
        self._seen: dict[int, int] = {}  # ubatches of each layer seen since arm
        self._states: dict[int, dict[int, npt.NDArray[np.float32]]] = {}
        import llama_cpp

        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_node)

    def arm(
        self, layers: tuple[int, ...], rows: list[int], outputs: list[bool], n_ubatch: int
    ) -> None:
        self._states = {layer: {} for layer in layers}
        self._seen = {layer: 0 for layer in layers}
        self._rows = sorted(rows)
        self._outputs = outputs
        self._n_ubatch = n_ubatch
        self._wanted = {tensor_name(layer).encode(): layer for layer in layers} if rows else {}

    def take(self) -> dict[int, dict[int, npt.NDArray[np.float32]]]:
        """The rows copied since `arm`: layer -> batch position -> state; disarms."""
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
        ubatch = self._seen[layer]
        self._seen[layer] = ubatch + 1
        if head.type != _GGML_TYPE_F32 or rows < 1:
            return True
        start = ubatch * self._n_ubatch
        stop = min(start + self._n_ubatch, len(self._outputs))
        if rows == stop - start:
            here = {position: position - start for position in range(start, stop)}
        else:  # only the outputs' rows, in order
            outs = [p for p in range(start, stop) if self._outputs[p]]
            here = {position: k for k, position in enumerate(outs)}
        for position in self._rows:
            if position in here:
                row = np.empty(width, dtype=np.float32)
                self._ggml.ggml_backend_tensor_get(
                    tensor, row.ctypes.data, here[position] * int(head.nb[1]), row.nbytes
                )
                self._states[layer][position] = row
        return True


def install(llama: Any, tap: HiddenStateTap) -> None:
    """Give `llama` (a `llama_cpp.Llama`) a fresh context whose scheduler calls
    `tap` for every node; the context it had is freed. The KV cache is empty
    afterwards, as after loading."""
    params = llama.context_params
    params.cb_eval = tap.callback
    params.cb_eval_user_data = None
    renew_context(llama)
