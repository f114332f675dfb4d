"""What a decode step costs by how many sequences it carries, as served.

    .venv/bin/python benches/serving/decode_batch.py [--llm NAME] [--sizes 1 2 3 4 8] \
        [--json out.json]

The served model's context (the server's `LlamaBackend`: its batch sizes,
one unified KV stream, the hidden-state tap installed, disarmed) reads one
prompt (~180 tokens) into sequence 0 and shares its cells with the others;
then for each batch size B, 24 steps each decoding one token for each of B
sequences: with logits for every sequence (as the batch engine asks: each
sequence draws its next token) and with logits for one only (the rest of
the step: the transformer's blocks without the output head's extra rows).
Medians per step; three rounds over every size and both ways, the lowest
median kept (a noisy host).

This is why several clients answered together, or one question's candidates
written together, gain less than B×: per token, a step of B sequences costs
`ms[B] / B`, against `ms[1]` alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from flask_app.inference.engine import Decoder
from flask_app.inference.llama_backend import LlamaBackend
from flask_app.inference.presets import DEFAULT_LLM, PRESETS
from flask_app.settings import Settings

PROMPT = "The Harlow Bridge opened in 1998 and is 412 metres long. " * 12
STEPS = 24
REPEATS = 3


def step_costs(
    decoder: Decoder, prompt: list[int], sizes: list[int]
) -> dict[str, dict[int, float]]:
    n = len(prompt)
    decoder.decode([(t, i, 0, i == n - 1) for i, t in enumerate(prompt)], ())
    most = max(sizes)
    for seq in range(1, most):
        decoder.seq_cp(0, seq, n)
    modes = {"every_sequence_ms": True, "one_output_ms": False}
    medians: dict[str, dict[int, list[float]]] = {k: {b: [] for b in sizes} for k in modes}
    for _ in range(REPEATS):  # rounds over every size and mode: a slow minute hits all
        for size in sizes:
            for key, every in modes.items():
                for seq in range(most):
                    decoder.seq_rm(seq, n)
                times = []
                for step in range(STEPS):
                    entries = [
                        (prompt[step], n + step, seq, every or seq == 0) for seq in range(size)
                    ]
                    started = time.perf_counter()
                    decoder.decode(entries, ())
                    times.append(time.perf_counter() - started)
                medians[key][size].append(statistics.median(times) * 1000)
    out = {k: {b: round(min(v), 2) for b, v in by.items()} for k, by in medians.items()}
    for key, by_size in out.items():
        print(key, by_size, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", choices=list(PRESETS), default=DEFAULT_LLM)
    parser.add_argument("--sizes", nargs="+", type=int, default=[1, 2, 3, 4, 8])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = Settings.load({"llm": args.llm}, {})
    most = max(args.sizes)
    backend = LlamaBackend(settings.llm_path(), n_ctx=4096, n_seq=most)
    assert backend.engine is not None
    backend.engine.stop()  # the bench drives the decoder itself
    decoder = backend.engine.decoder
    costs = step_costs(decoder, backend.tokens(PROMPT), args.sizes)
    every, one = costs["every_sequence_ms"], costs["one_output_ms"]
    result = {
        "llm": args.llm,
        **costs,
        # per token against one sequence alone: how much a batch of B buys
        "tokens_per_step_cost": {b: round(b * every[1] / every[b], 2) for b in args.sizes},
        # what each sequence's logits (the output head's row) add to a step
        "output_head_ms_per_extra_sequence": {
            b: round((every[b] - one[b]) / (b - 1), 2) for b in args.sizes if b > 1
        },
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    backend.close()


if __name__ == "__main__":
    main()
