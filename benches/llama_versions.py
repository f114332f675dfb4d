"""Two llama-cpp-python builds against each other on the presets' GGUF files:
prompt reading and generation speed, resident memory and the generated text.

Each build is a directory that holds a `llama_cpp` package (`pip install
--target DIR wheel`), or `installed` for the one in this environment. Every
measurement is a fresh process (the server's `LlamaBackend`, its hidden-state
tap installed and idle, 2 threads): one warm-up answer, then a 528-token RAG
prompt read and 32 greedy tokens drawn. Rounds alternate the builds, so both
share the host's drift; medians are reported with their ratio.

    .venv/bin/python benches/llama_versions.py --builds /tmp/llama-old installed \
        [--llms qwen2.5-coder-0.5b qwen2.5-coder-1.5b] [--rounds 4] \
        [--json benches/results/llama_versions.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GENERATED = 32
SYSTEM = "Answer the question from the passages only. Say so when they do not hold the answer."


def child(llm_name: str, texts: list[str]) -> None:
    """One measurement, in this process (the build on its path), as JSON on stdout."""
    import resource
    import time

    import llama_cpp

    from flask_app.inference.llm import ChatMessage, LlamaBackend, Sampling
    from flask_app.settings import Settings

    settings = Settings.load({"llm": llm_name}, {})
    backend = LlamaBackend(settings.llm_path(), n_ctx=2048, n_threads=2)
    greedy = Sampling(temperature=0.0)

    def ask(passages: list[str], question: str) -> tuple[str, float, float, float, str]:
        messages: list[ChatMessage] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "\n\n".join(passages) + "\n\nQuestion: " + question},
        ]
        prompt = backend.render(messages)
        started = time.perf_counter()
        first, pieces = 0.0, []
        for piece in backend.generate(prompt, max_tokens=GENERATED, sampling=greedy, probe=None):
            first = first or time.perf_counter()
            pieces.append(piece)
        return prompt, started, first, time.perf_counter(), "".join(pieces)

    ask(texts[-2:], "What is this about?")  # warm-up: another prompt
    prompt, started, first, done, text = ask(texts[:-2], "What does the first passage say?")
    tokens, out = backend.count_tokens(prompt), backend.count_tokens(text)
    print(
        json.dumps(
            {
                "version": llama_cpp.__version__,
                "prompt_tokens": tokens,
                "generated_tokens": out,
                "prompt_tokens_per_s": tokens / (first - started),
                "generation_tokens_per_s": (out - 1) / (done - first) if out > 1 else None,
                "ttft_s": first - started,
                "total_s": done - started,
                "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "text": text,
            }
        )
    )


def passages() -> list[str]:
    """The own set's first documents up to ~300 words (the measured prompt,
    528 tokens with the template), then two more for the warm-up prompt."""
    documents = json.loads((ROOT / "benches/eval/own/documents.json").read_text())["documents"]
    texts = [d["text"] for d in documents]
    chosen, words = [], 0
    for text in texts:
        chosen.append(text)
        words += len(text.split())
        if words > 300:
            break
    return chosen + texts[len(chosen) : len(chosen) + 2]


def measure(build: str, llm: str, texts: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    path = [str(ROOT)] if build == "installed" else [build, str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(path)
    run = subprocess.run(
        [sys.executable, __file__, "--child", llm, json.dumps(texts)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if run.returncode != 0:
        raise SystemExit(f"{build} {llm} failed:\n{run.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builds", nargs=2, metavar="BUILD")
    parser.add_argument("--llms", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], json.loads(args.child[1]))
        return
    if not args.builds:
        parser.error("--builds: two builds to compare")
    texts = passages()
    report: dict[str, Any] = {}
    for llm in args.llms:
        runs: dict[str, list[dict[str, Any]]] = {b: [] for b in args.builds}
        for round_no in range(args.rounds):
            order = args.builds if round_no % 2 == 0 else args.builds[::-1]
            for build in order:
                runs[build].append(measure(build, llm, texts))
                r = runs[build][-1]
                print(
                    f"{llm} round {round_no + 1} {r['version']:>7}: prompt "
                    f"{r['prompt_tokens_per_s']:.0f} tok/s, generation "
                    f"{r['generation_tokens_per_s']:.1f} tok/s, rss {r['max_rss_mb']:.0f} MB",
                    flush=True,
                )
        summary: dict[str, Any] = {}
        for rs in runs.values():
            summary[rs[0]["version"]] = {
                key: round(statistics.median(r[key] for r in rs), 3)
                for key in (
                    "prompt_tokens_per_s",
                    "generation_tokens_per_s",
                    "ttft_s",
                    "total_s",
                    "max_rss_mb",
                )
            } | {
                "prompt_tokens": rs[0]["prompt_tokens"],
                "text": rs[0]["text"],
                "same_text_every_round": len({r["text"] for r in rs}) == 1,
            }
        a, b = (summary[runs[build][0]["version"]] for build in args.builds)
        summary["ratio_second_to_first"] = {
            key: round(b[key] / a[key], 3)
            for key in ("prompt_tokens_per_s", "generation_tokens_per_s", "ttft_s", "max_rss_mb")
        }
        summary["same_text"] = a["text"] == b["text"]
        report[llm] = summary
        print(json.dumps({llm: summary}, indent=1), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
