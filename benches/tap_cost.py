"""What the hidden-state tap costs llama.cpp when it is installed but not
armed: two contexts of the same model, one made with the tap's evaluation
callback (`flask_app/inference/hidden_state.py`), one without, prefilling
the same ~500-token prompt and generating 32 greedy tokens, alternating.

    .venv/bin/python benches/tap_cost.py [--llm qwen2.5-coder-0.5b] [--rounds 5]

(`benches/answer_probe.py cost` measures the armed tap and the probe on the
evaluation's questions; this isolates the callback llama.cpp asks on every
graph node of every decode.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from llama_cpp import Llama

from flask_app.inference.hidden_state import HiddenStateTap, install
from flask_app.inference.presets import PRESETS
from flask_app.settings import Settings

GENERATED = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--llm", choices=list(PRESETS), default="qwen2.5-coder-0.5b")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path = str(Settings.load({"llm": args.llm}, os.environ).llm_path())
    models = {
        "plain": Llama(path, n_ctx=2048, n_threads=2, verbose=False),
        "tap installed": Llama(path, n_ctx=2048, n_threads=2, verbose=False),
    }
    tap = HiddenStateTap()
    install(models["tap installed"], tap)
    text = " ".join(
        f"The item number {i} is stored on shelf {i * 7 % 13} of aisle {i % 5}." for i in range(30)
    )
    prefill: dict[str, list[float]] = {name: [] for name in models}
    per_token: dict[str, list[float]] = {name: [] for name in models}
    for round_no in range(args.rounds):
        for name, model in models.items():
            model.reset()  # type: ignore[no-untyped-call]
            tokens = model.tokenize(f"{text} Round {round_no}.".encode())
            started = time.perf_counter()
            model.eval(tokens)
            read = time.perf_counter()
            for _ in range(GENERATED):
                model.eval([model.sample(temp=0.0)])
            done = time.perf_counter()
            prefill[name].append(read - started)
            per_token[name].append((done - read) / GENERATED)
    base_prefill = statistics.median(prefill["plain"])
    base_token = statistics.median(per_token["plain"])
    print(f"{args.llm}, {len(tokens)} prompt tokens, {args.rounds} alternating rounds (medians)")
    for name in models:
        p, t = statistics.median(prefill[name]), statistics.median(per_token[name])
        print(
            f"{name}: prefill {p:.3f} s ({p / base_prefill:.3f}x), "
            f"{1000 * t:.1f} ms per generated token ({t / base_token:.3f}x)"
        )


if __name__ == "__main__":
    main()
