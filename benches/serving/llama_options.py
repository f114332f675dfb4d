"""Two llama.cpp options the server does not take, measured against its own.

    .venv/bin/python benches/serving/llama_options.py [--llm NAME] [--rounds 2] [--json out.json]

The served model's context (the server's `LlamaBackend`) built three ways,
in turn, `--rounds` times (a noisy host: the lowest of each is kept):
`served` as the server builds it; `no-repack` with llama.cpp's weight
repacking off (`use_extra_bufts` false: the Q4_0 weights stay in the
file's layout, multiplied by the generic kernels); `flash-attention` with
llama.cpp's flash attention on (llama-cpp-python turns it off by default).
For each: the time to read a prompt of ~240 and ~720 tokens into an empty
cache, and a decode step's cost for 1, 2 and 4 sequences
(`decode_batch.step_costs`).

Flash attention also changes the hidden states the verifier was fitted on
(by rounding), so a switch needs its rows collected again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import llama_cpp.llama_cpp

from benches.serving.decode_batch import PROMPT, step_costs
from flask_app.inference.engine import Decoder
from flask_app.inference.llama_backend import N_UBATCH, LlamaBackend
from flask_app.inference.presets import DEFAULT_LLM, PRESETS
from flask_app.settings import Settings

VARIANTS = ("served", "no-repack", "flash-attention")
SIZES = [1, 2, 4]


class FlashAttention(llama_cpp.Llama):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, flash_attn=True, **kwargs)


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """llama-cpp-python's constructor with one option changed, for one model load."""
    module: Any = llama_cpp.llama_cpp  # what Llama.__init__ calls
    package: Any = llama_cpp  # what LlamaBackend constructs
    default_params, llama_class = module.llama_model_default_params, package.Llama
    if name == "no-repack":

        def params() -> Any:
            built = default_params()
            built.use_extra_bufts = False
            return built

        module.llama_model_default_params = params
    elif name == "flash-attention":
        package.Llama = FlashAttention
    try:
        yield
    finally:
        module.llama_model_default_params, package.Llama = default_params, llama_class


def empty(decoder: Decoder) -> None:
    for seq in range(max(SIZES)):
        decoder.seq_rm(seq, 0)


def prompt_read_s(decoder: Decoder, tokens: list[int]) -> float:
    """Seconds to read `tokens` into an empty sequence 0, in batches of the
    context's micro-batch (llama.cpp reads a larger batch in those too)."""
    empty(decoder)
    started = time.perf_counter()
    last = len(tokens) - 1
    for at in range(0, len(tokens), N_UBATCH):
        chunk = tokens[at : at + N_UBATCH]
        decoder.decode([(t, at + i, 0, at + i == last) for i, t in enumerate(chunk)], ())
    return time.perf_counter() - started


def measure(path: Path, name: str) -> dict[str, Any]:
    with variant(name):
        backend = LlamaBackend(path, n_ctx=4096, n_seq=max(SIZES))
    assert backend.engine is not None
    backend.engine.stop()  # the bench drives the decoder itself
    decoder = backend.engine.decoder
    result: dict[str, Any] = {}
    for repeats in (1, 3):
        tokens = backend.tokens(PROMPT * repeats)
        reads = [prompt_read_s(decoder, tokens) for _ in range(3)]
        result[f"read_{len(tokens)}_tokens_s"] = min(reads)
    empty(decoder)
    result.update(step_costs(decoder, backend.tokens(PROMPT), SIZES))
    backend.close()
    return result


def lowest(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = {k: min(r[key][k] for r in runs) for k in value}
        else:
            out[key] = round(min(r[key] for r in runs), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", choices=list(PRESETS), default=DEFAULT_LLM)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    path = Settings.load({"llm": args.llm}, {}).llm_path()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):  # in turn, so a slow minute hits every variant
        for name in VARIANTS:
            runs[name].append(measure(path, name))
            print(name, runs[name][-1], flush=True)
    result = {"llm": args.llm, "rounds": args.rounds, **{n: lowest(r) for n, r in runs.items()}}
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
