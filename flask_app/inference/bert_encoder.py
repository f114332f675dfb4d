"""A BERT encoder in NumPy over a GGUF file's weights, for batches of texts.

llama.cpp decodes one embedding text per call at ~30 GFLOP/s on this class of
CPU, and several texts in one decode are slower still (its non-causal
attention spans the whole batch). The same forward pass as a few large
matrix products reaches the BLAS library's ~90 GFLOP/s per core, and texts of
similar length share each product. The graph follows llama.cpp's BERT
(post-norm layers, tanh GELU, mean or CLS pooling), so vectors agree with
llama.cpp's to ~1e-6 and stored collections stay comparable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

Floats = npt.NDArray[np.float32]

POOLING_MEAN = 1
POOLING_CLS = 2
# padded tokens per forward pass: products large enough for BLAS, attention
# scores small enough for the cache (512 measured fastest of 256-4096)
TOKENS_PER_STEP = 512


class UnsupportedModel(ValueError):
    """The GGUF is not a BERT this encoder can run."""


@dataclass(frozen=True)
class _Layer:
    qkv: Floats  # (dim, 3·dim): query, key and value projections side by side
    qkv_bias: Floats
    out: Floats
    out_bias: Floats
    attn_norm: tuple[Floats, Floats]
    up: Floats
    up_bias: Floats
    down: Floats
    down_bias: Floats
    ffn_norm: tuple[Floats, Floats]


class BertEncoder:
    def __init__(self, path: Path) -> None:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        fields = {name: field.contents() for name, field in reader.fields.items()}
        if fields.get("general.architecture") != "bert":
            raise UnsupportedModel(f"architecture {fields.get('general.architecture')!r}")
        self.pooling = int(fields.get("bert.pooling_type", POOLING_MEAN))
        if self.pooling not in (POOLING_MEAN, POOLING_CLS):
            raise UnsupportedModel(f"pooling type {self.pooling}")
        self.heads = int(fields["bert.attention.head_count"])
        self.eps = float(fields["bert.attention.layer_norm_epsilon"])
        # copies, so nothing keeps the reader's mapping of the file (and its
        # resident pages) alive once the weights are converted
        weights = {t.name: np.array(t.data, dtype=np.float32) for t in reader.tensors}

        def matrix(name: str) -> Floats:  # GGUF rows are outputs; x @ W wants inputs first
            return np.ascontiguousarray(weights[name].T)

        def norm(name: str) -> tuple[Floats, Floats]:
            return weights[f"{name}.weight"], weights[f"{name}.bias"]

        # the table is only gathered from: kept as float16 (what the GGUF holds,
        # 23 MB less for MiniLM), rows turned into float32 as they are taken
        self.token_embeddings = weights["token_embd.weight"].astype(np.float16)
        self.positions = weights["position_embd.weight"]
        self.token_type = weights["token_types.weight"][0]
        self.embedding_norm = norm("token_embd_norm")
        self.dim = int(self.token_embeddings.shape[1])
        self.max_tokens = int(fields["bert.context_length"])
        scale = np.float32(1.0 / np.sqrt(self.dim // self.heads))
        self.layers = []
        for i in range(int(fields["bert.block_count"])):
            b = f"blk.{i}"
            self.layers.append(
                _Layer(
                    # 1/sqrt(head_dim) of the attention scores folded into the query
                    qkv=np.concatenate(
                        [matrix(f"{b}.attn_q.weight") * scale]
                        + [matrix(f"{b}.attn_{p}.weight") for p in "kv"],
                        axis=1,
                    ),
                    qkv_bias=np.concatenate(
                        [weights[f"{b}.attn_q.bias"] * scale]
                        + [weights[f"{b}.attn_{p}.bias"] for p in "kv"]
                    ),
                    out=matrix(f"{b}.attn_output.weight"),
                    out_bias=weights[f"{b}.attn_output.bias"],
                    attn_norm=norm(f"{b}.attn_output_norm"),
                    up=matrix(f"{b}.ffn_up.weight"),
                    up_bias=weights[f"{b}.ffn_up.bias"],
                    down=matrix(f"{b}.ffn_down.weight"),
                    down_bias=weights[f"{b}.ffn_down.bias"],
                    ffn_norm=norm(f"{b}.layer_output_norm"),
                )
            )

    def encode(
        self, token_ids: Sequence[Sequence[int]], threads: Callable[[], int] = lambda: 1
    ) -> Floats:
        """One pooled (not normalised) row per token sequence, in input order.
        `threads()` is asked before each step (~0.1 s), so the caller can lend
        the encoder idle cores and take them back."""
        out = np.empty((len(token_ids), self.dim), dtype=np.float32)
        order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))
        start = 0
        while start < len(order):
            # texts of similar length share a step, so little is padding
            end = start + 1
            while (
                end < len(order)
                and (end - start + 1) * len(token_ids[order[end]]) <= TOKENS_PER_STEP
            ):
                end += 1
            rows = order[start:end]
            with _blas().limit(limits=threads(), user_api="blas"):
                out[rows] = self._forward([token_ids[i] for i in rows])
            start = end
        return out

    def _forward(self, batch: list[Sequence[int]]) -> Floats:
        n, length = len(batch), max(len(ids) for ids in batch)
        ids = np.zeros((n, length), dtype=np.int64)
        valid = np.zeros((n, length), dtype=bool)
        for i, seq in enumerate(batch):
            ids[i, : len(seq)] = seq
            valid[i, : len(seq)] = True
        x = self.token_embeddings[ids].astype(np.float32)
        x += self.positions[:length] + self.token_type
        x = self._norm(x.reshape(n * length, self.dim), self.embedding_norm)
        # padded keys get no attention weight
        mask = np.where(valid, 0.0, -np.inf).astype(np.float32)[:, None, None, :]
        for layer in self.layers:
            x = self._layer(x, layer, n, length, mask)
        hidden = x.reshape(n, length, self.dim)
        if self.pooling == POOLING_CLS:
            pooled: Floats = hidden[:, 0, :]
            return pooled
        counts = valid.sum(axis=1, keepdims=True).astype(np.float32)
        mean: Floats = (hidden * valid[:, :, None]).sum(axis=1) / counts
        return mean

    def _layer(self, x: Floats, layer: _Layer, n: int, length: int, mask: Floats) -> Floats:
        head_dim = self.dim // self.heads
        qkv = x @ layer.qkv
        qkv += layer.qkv_bias
        # (n·length, 3·dim) → three (n, heads, length, head_dim)
        q, k, v = np.ascontiguousarray(
            qkv.reshape(n, length, 3, self.heads, head_dim).transpose(2, 0, 3, 1, 4)
        )
        scores = q @ k.transpose(0, 1, 3, 2)
        scores += mask
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores *= 1.0 / scores.sum(axis=-1, keepdims=True)
        attended = (scores @ v).transpose(0, 2, 1, 3).reshape(n * length, self.dim)
        projected = attended @ layer.out
        projected += layer.out_bias
        projected += x
        x = self._norm(projected, layer.attn_norm)
        hidden = x @ layer.up
        hidden += layer.up_bias
        _gelu(hidden)
        out = np.asarray(hidden @ layer.down, dtype=np.float32)  # (no copy; for the type)
        out += layer.down_bias
        out += x
        return self._norm(out, layer.ffn_norm)

    def _norm(self, x: Floats, params: tuple[Floats, Floats]) -> Floats:
        """LayerNorm of each row, in place."""
        weight, bias = params
        x -= x.mean(axis=-1, keepdims=True)
        variance = np.einsum("ij,ij->i", x, x)[:, None] / np.float32(x.shape[1])
        x *= 1.0 / np.sqrt(variance + self.eps)
        x *= weight
        x += bias
        return x


@functools.cache
def _blas() -> ThreadpoolController:
    """The BLAS libraries, found once (a lookup scans the loaded libraries)."""
    return ThreadpoolController()


def _gelu(x: Floats) -> None:
    """tanh-approximated GELU in place (llama.cpp's form)."""
    inner = x * x
    inner *= np.float32(0.044715)
    inner += 1.0
    inner *= x
    inner *= np.float32(np.sqrt(2.0 / np.pi))
    np.tanh(inner, out=inner)
    inner += 1.0
    x *= inner
    x *= np.float32(0.5)
