"""Convert a sentence-transformers BERT checkpoint (safetensors + vocab.txt)
into a GGUF that llama.cpp runs as a mean-pooled embedding model.

llama.cpp's own converter needs torch; this one uses only the `gguf` package's
tensor-name map and writer, plus `safetensors` for reading.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from safetensors.numpy import load_file

# Tensors llama.cpp keeps in f32 however the rest is stored.
_F32_TENSORS = ("token_types.weight",)
# Checkpoint entries that are not part of the encoder llama.cpp runs.
_SKIPPED_PREFIXES = ("pooler.", "embeddings.position_ids", "cls.")


def _phantom_space(token: str) -> str:
    """WordPiece → llama.cpp's WPM vocabulary: word starts carry U+2581."""
    if token.startswith("[") and token.endswith("]"):
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def _token_type(token: str, special: set[str]) -> int:
    if token == "[UNK]":
        return int(gguf.TokenType.UNKNOWN)
    if token in special:
        return int(gguf.TokenType.CONTROL)
    return int(gguf.TokenType.NORMAL)


def convert(src: Path, dst: Path, name: str) -> None:
    """Write `dst` (f16 GGUF) from the model directory `src`."""
    config: dict[str, Any] = json.loads((src / "config.json").read_text())
    if config.get("model_type") != "bert":
        raise ValueError(f"{src}: model_type is {config.get('model_type')!r}, expected 'bert'")
    vocab = (src / "vocab.txt").read_text(encoding="utf-8").splitlines()
    special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    ids = {tok: i for i, tok in enumerate(vocab)}
    n_layers = int(config["num_hidden_layers"])

    writer = gguf.GGUFWriter(str(dst), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    writer.add_name(name)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(n_layers)
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config["layer_norm_eps"]))
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    writer.add_tokenizer_model("bert")
    writer.add_token_type_count(int(config.get("type_vocab_size", 2)))
    writer.add_token_list([_phantom_space(t) for t in vocab])
    writer.add_token_types([_token_type(t, special) for t in vocab])
    writer.add_bos_token_id(ids["[CLS]"])
    writer.add_sep_token_id(ids["[SEP]"])
    writer.add_unk_token_id(ids["[UNK]"])
    writer.add_pad_token_id(ids["[PAD]"])
    writer.add_mask_token_id(ids["[MASK]"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layers)
    tensors = load_file(str(src / "model.safetensors"))
    for key in sorted(tensors):
        hf_name = key.removeprefix("bert.")
        if hf_name.startswith(_SKIPPED_PREFIXES):
            continue
        new_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise ValueError(f"{src}: no GGUF name for tensor {key!r}")
        data = tensors[key]
        if data.ndim >= 2 and new_name not in _F32_TENSORS:
            data = data.astype(np.float16)
        else:
            data = data.astype(np.float32)
        writer.add_tensor(new_name, data)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
