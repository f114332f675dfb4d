"""Answer candidates as served, with the hidden states a verifier reads.

    .venv/bin/python -m benches.quality.candidates --llm qwen2.5-coder-0.5b --split dev
    .venv/bin/python -m benches.quality.candidates --llm qwen2.5-coder-0.5b --split train \
        --max-sets 100
    .venv/bin/python -m benches.quality.candidates --llm qwen2.5-coder-0.5b --split dev \
        --sets own gnu-help

For each question of each set (SQuAD articles built by `benches.quality.squad`,
or the project's evaluation sets by name), the store holds the set's passages
uploaded as a user would; the question is grounded as `/answer` grounds it
(retrieval, evidence, the preset's prompt), and from that one prompt the
model writes a greedy answer and `--samples` sampled ones (temperature
`--temperature`), each at most `--max-tokens` tokens, all decoded together
from the prompt's one prefill. A quarter of the questions (chosen by the
question's hash) carry a client's own system prompt or footer from
`CLIENT_PROMPTS`, so what is learnt also holds under them.

Kept per question (`rows.jsonl`, one line) and per candidate: the text, how
it ended, its tokens' log-probabilities, its grade (right, wrong, refusal)
against the set's expected answers; and (`states.npz`, float16) the hidden
state at the candidate's last decoded token and the mean over its tokens at
the preset's `LAYERS`, and the prompt's last token at the same layers.
Collection is resumable: a set whose files exist is skipped.
Rows go to CACHE/verifier/<preset>/<family>/<split>/<set>/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benches.quality import eval_sets, squad
from benches.quality.rag_eval import TOP_K, is_refusal, mentions, upload_items
from flask_app import rag
from flask_app.api.http.extensions import answer_config_of
from flask_app.app import create_app
from flask_app.inference.engine import Branch, Request
from flask_app.inference.presets import PRESETS
from flask_app.inference.sampler import Sampling
from flask_app.rag.answer import AnswerConfig, ground
from flask_app.rag.retrieval import StoredCollection
from flask_app.services import Services, load_services
from flask_app.settings import Settings

# hidden layers read, per preset: last token at all, the mean at MEAN_LAYERS;
# and at all, the state after SNAPSHOTS tokens (where a long answer pauses)
LAYERS = {
    "qwen2.5-coder-0.5b": (8, 10, 12, 14, 16, 18, 20, 22),
    "qwen2.5-coder-1.5b": (12, 14, 16, 18, 20, 22, 24, 26),
}
MEAN_LAYERS = {"qwen2.5-coder-0.5b": (14, 18), "qwen2.5-coder-1.5b": (18, 24)}
SNAPSHOTS = (8, 16)

# a client's own words: (header_prompt, footer_prompt); None keeps the default
CLIENT_PROMPTS: list[tuple[str | None, str | None]] = [
    ("You are a helpful assistant.", None),
    ("You are a friendly support agent. Answer the customer's question.", None),
    ("Answer the question using the documents.", None),
    (None, "Answer briefly."),
    (None, "Answer in one sentence and mention the document you used."),
    ("You are an expert assistant. Be concise and accurate.", "Keep it short."),
]
CLIENT_SHARE = 0.25


def cache_dir() -> Path:
    return Settings.load({}, os.environ).cache_dir / "verifier"


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def client_prompts(question: str) -> tuple[str | None, str | None]:
    """The client's own prompts this question is asked with (mostly none)."""
    h = _hash(question)
    if (h % 1000) / 1000 >= CLIENT_SHARE:
        return None, None
    return CLIENT_PROMPTS[(h // 1000) % len(CLIENT_PROMPTS)]


def grade(text: str, expected: list[str] | None) -> str:
    if is_refusal(text) or not text.strip():
        return "refusal"
    if expected is not None and mentions(text, expected):
        return "right"
    return "wrong"


class Collector:
    """One preset's model behind the app's grounding, with a batch engine."""

    def __init__(self, services: Services, app: Any, layers: tuple[int, ...], samples: int):
        self.services = services
        self.app = app
        self.client = app.test_client()
        llm = services.llm
        assert llm is not None
        backend: Any = llm.backend
        self.backend = backend
        self.engine = llm.engine
        self.layers = layers
        self.samples = samples
        self.refusal_ids = backend.first_tokens(("I", "Sorry"))
        with app.app_context():
            self.config: AnswerConfig = replace(answer_config_of(app), verifier=None)

    def ground(self, query: str, header: str | None, footer: str | None) -> Any:
        services = self.services
        assert services.llm is not None and services.embedder is not None
        collection = services.store.edge()
        question = rag.Question(
            query=query, top_k=TOP_K, header_prompt=header, footer_prompt=footer
        )
        vector = rag.query_vector(collection, question, services.embedder)
        retriever = StoredCollection(collection, vector, None, embedder=services.embedder)
        return ground(services.llm, retriever, question, self.config)

    def ask(
        self, query: str, temperature: float, max_tokens: int, mean_layers: tuple[int, ...]
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        header, footer = client_prompts(query)
        started = time.perf_counter()
        grounding = self.ground(query, header, footer)
        assert grounding.prompt is not None
        prompt = self.backend.render(grounding.prompt.messages)
        tokens = self.backend.tokens(prompt)
        seed = _hash(query) % (2**31)
        sample = Sampling(temperature=temperature, top_p=0.95, top_k=40, seed=seed)
        branches = (
            Branch(Sampling(temperature=0.0), max_tokens),
            *[Branch(sample, max_tokens) for _ in range(self.samples)],
        )
        grounded = time.perf_counter()
        job = self.engine.submit(
            Request(tokens, branches, self.layers, self.refusal_ids, snapshots=SNAPSHOTS)
        )
        job.wait_settled(None)
        settled = time.perf_counter()
        job.close()
        assert job.first is not None and job.prefilled_at is not None
        row: dict[str, Any] = {
            "query": query,
            "header_prompt": header,
            "footer_prompt": footer,
            "prompt": grounding.prompt.messages[-1]["content"],
            "prompt_tokens": len(tokens),
            "sources": [hit.id for hit in grounding.sources],
            "best_cosine": max((hit.score for hit in grounding.sources), default=0.0),
            "evidence_score": grounding.evidence_score,
            "refusal_probability": job.first.refusal_probability,
            "top_probability": job.first.top_probability,
            "entropy": job.first.entropy,
            "ground_s": round(grounded - started, 4),
            "prefill_s": round(job.prefilled_at - job.submitted, 4),
            "candidates_s": round(settled - job.prefilled_at, 4),
            "candidates": [
                {
                    "text": run.text.strip(),
                    "finish": run.finish.value if run.finish else None,
                    "tokens": len(run.tokens),
                    "logprobs": [round(p, 4) for p in run.logprobs],
                }
                for run in job.branches
            ],
        }

        def at(run: Any, n: int) -> np.ndarray:
            """The state after n tokens (the last one for a shorter answer)."""
            held = run.snapshots.get(n, run.last_state)
            return np.stack([held.get(layer, job.prompt_state[layer]) for layer in self.layers])

        states = {
            "prompt": np.stack([job.prompt_state[layer] for layer in self.layers]),
            **{f"at{n}": np.stack([at(run, n) for run in job.branches]) for n in SNAPSHOTS},
            "last": np.stack(
                [
                    np.stack(
                        [
                            run.last_state.get(layer, job.prompt_state[layer])
                            for layer in self.layers
                        ]
                    )
                    for run in job.branches
                ]
            ),
            "mean": np.stack(
                [
                    np.stack(
                        [
                            (run.state_sum[layer] / max(1, run.fed)).astype(np.float32)
                            if layer in run.state_sum
                            else job.prompt_state[layer]
                            for layer in mean_layers
                        ]
                    )
                    for run in job.branches
                ]
            ),
        }
        return row, {k: v.astype(np.float16) for k, v in states.items()}


@contextmanager
def collector(llm: str, samples: int) -> Iterator[Collector]:
    with tempfile.TemporaryDirectory() as tmp:
        overrides = {
            "answer_probe": "off",
            "answer_refusal_probability": "off",
            "llm_sequences": samples + 1,
        }
        settings = Settings.load({"data_dir": Path(tmp), "llm": llm, **overrides}, os.environ)
        services = load_services(settings)
        try:
            yield Collector(services, create_app(settings, services), LAYERS[llm], samples)
        finally:
            services.store.close()


def collect_set(
    c: Collector,
    evset: eval_sets.EvalSet,
    split: str,
    out: Path,
    temperature: float,
    max_tokens: int,
    mean_layers: tuple[int, ...],
) -> int:
    questions = [q for q in evset.questions if q["split"] == split]
    if not questions:
        return 0
    items = evset.passages()
    upload_items(c.client, items)
    rows, states = [], []
    try:
        for q in questions:
            row, st = c.ask(q["q"], temperature, max_tokens, mean_layers)
            row["expected"] = q["expect"]
            row["set"] = evset.name
            row["split"] = split
            row["evidence_holds"] = q["expect"] is not None and mentions(row["prompt"], q["expect"])
            for cand in row["candidates"]:
                cand["grade"] = grade(cand["text"], q["expect"])
            rows.append(row)
            states.append(st)
    finally:
        c.services.store.edge().delete([it["id"] for it in items])
    out.mkdir(parents=True, exist_ok=True)
    stacked: dict[str, Any] = {key: np.stack([s[key] for s in states]) for key in states[0]}
    np.savez(out / "states.tmp.npz", **stacked)
    (out / "rows.tmp.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    )
    (out / "states.tmp.npz").replace(out / "states.npz")
    (out / "rows.tmp.jsonl").replace(out / "rows.jsonl")
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", choices=list(PRESETS), required=True)
    parser.add_argument("--split", choices=["train", "dev", "test"], required=True)
    parser.add_argument("--sets", nargs="+", help="evaluation sets by name (default: SQuAD)")
    parser.add_argument(
        "--small", action="store_true", help="SQuAD's stores of 2 paragraphs (squad build --small)"
    )
    parser.add_argument("--max-sets", type=int, help="at most this many sets (in order)")
    parser.add_argument("--skip-sets", type=int, default=0, help="start after this many sets")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="default: CACHE/verifier")
    args = parser.parse_args()
    if args.split == "test" and not args.sets:
        parser.error("SQuAD's test articles are for the served evaluation only")
    root = (args.out or cache_dir()) / args.llm
    if args.sets:
        family, specs = "sets", [str(eval_sets.EVAL / name) for name in args.sets]
    else:
        family = "squad-small" if args.small else "squad"
        specs = [str(p) for p in squad.set_dirs(squad.default_dir(), args.split, args.small)]
    specs = specs[args.skip_sets :][: args.max_sets]
    with collector(args.llm, args.samples) as c:
        done = 0
        started = time.perf_counter()
        for n, spec in enumerate(specs, 1):
            evset = eval_sets.load(spec)
            out = root / family / args.split / evset.name
            if (out / "rows.jsonl").is_file():
                continue
            count = collect_set(
                c, evset, args.split, out, args.temperature, args.max_tokens, MEAN_LAYERS[args.llm]
            )
            done += count
            rate = done / (time.perf_counter() - started)
            print(
                f"[{n}/{len(specs)}] {evset.name}: {count} questions ({rate * 60:.0f}/min)",
                file=sys.stderr,
                flush=True,
            )


if __name__ == "__main__":
    main()
