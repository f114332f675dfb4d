"""Decoding that copies from the prompt, against the plain path, on the
prompts the server builds for an evaluation set's questions:

- plain: llama-cpp-python's `create_completion`, greedy, as the server runs it;
- prompt lookup: `LlamaPromptLookupDecoding` drafts the next tokens from
  n-grams of the prompt, the model checks them in one batch;
- speculative (`--llm qwen2.5-coder-1.5b` only): the 0.5B model drafts
  `--draft-tokens` tokens greedily (same vocabulary), the 1.5B checks them.

llama-cpp-python checks drafts only with `logits_all` (the output layer run
for every prompt token, logits kept for the whole window), so the drafting
variants pay for that in prefill and memory. Each variant is its own model
instance (n_ctx 2048, 2 threads); per question they run in turn, so they
share the machine's drift; each keeps its KV cache across questions (the
system prompt is reused, as served). Reports medians of time to first token
and total, tokens per second of decoding, and how many answers are
identical to the plain path's.

    .venv/bin/python benches/decode_speedup.py [--llm qwen2.5-coder-1.5b] [--set python-reference]
        [--questions 12] [--json benches/results/decode_speedup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benches import eval_sets
from flask_app import rag
from flask_app.api.http.extensions import answer_config_of
from flask_app.app import create_app
from flask_app.inference.llama_runtime import available_cores
from flask_app.inference.llm import Sampling
from flask_app.inference.presets import PRESETS, QWEN_05B
from flask_app.rag.answer import ground
from flask_app.rag.retrieval import StoredCollection
from flask_app.services import load_services
from flask_app.settings import Settings

N_CTX = 2048
MAX_TOKENS = 128


def prompts(llm_name: str, set_name: str, count: int) -> tuple[list[str], Path]:
    """The rendered prompts the server builds (top_k 5, evidence units) for
    the set's first `count` answerable dev questions, and the model's path."""
    evset = eval_sets.load(set_name)
    asked = [q for q in evset.questions if q["split"] == "dev" and q["expect"]][:count]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "llm": llm_name}, os.environ)
        services = load_services(settings)
        app = create_app(settings, services)
        reply = app.test_client().post(
            "/upload", json={"store_mode": "text", "items": evset.passages()}
        )
        assert reply.status_code == 200, reply.get_data()
        llm = services.llm
        assert llm is not None and services.embedder is not None
        backend: Any = llm.backend
        collection = services.store.edge()
        texts = []
        for item in asked:
            question = rag.Question(query=item["q"], top_k=5, sampling=Sampling(temperature=0.0))
            vector = rag.query_vector(collection, question, services.embedder)
            retriever = StoredCollection(collection, vector)
            grounding = ground(llm, retriever, question, answer_config_of(app))
            assert grounding.prompt is not None
            texts.append(backend.render(grounding.prompt.messages))
        path = settings.llm_path()
        services.store.close()
    return texts, path


def small_model_draft(path: Path, tokens: int) -> Any:
    """A draft model for llama-cpp-python: the 0.5B continues the sequence
    greedily for `tokens` tokens (its KV cache keeps the common prefix)."""
    from llama_cpp.llama_speculative import LlamaDraftModel

    class SmallModelDraft(LlamaDraftModel):
        def __init__(self) -> None:
            self.llama = model(path)

        def __call__(
            self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any
        ) -> npt.NDArray[np.intc]:
            drafted: list[int] = []
            for token in self.llama.generate(list(map(int, input_ids)), temp=0.0):
                drafted.append(token)
                if len(drafted) == tokens or token == self.llama.token_eos():
                    break
            return np.array(drafted, dtype=np.intc)

    return SmallModelDraft()


def model(path: Path, draft: Any = None) -> Any:
    import llama_cpp

    return llama_cpp.Llama(
        model_path=str(path),
        n_ctx=N_CTX,
        n_batch=512,
        n_ubatch=256,
        n_threads=available_cores(),
        use_mmap=False,
        draft_model=draft,
        verbose=False,
    )


def timed(llama: Any, prompt: str) -> dict[str, Any]:
    start = time.perf_counter()
    first = None
    parts = []
    for chunk in llama.create_completion(
        prompt, max_tokens=MAX_TOKENS, temperature=0.0, stream=True
    ):
        if first is None:
            first = time.perf_counter()
        parts.append(chunk["choices"][0]["text"])
    end = time.perf_counter()
    text = "".join(parts)
    return {
        "ttft": (first or end) - start,
        "total": end - start,
        "decode_tokens": len(llama.tokenize(text.encode(), add_bos=False)),
        "text": text,
    }


def summary(runs: list[dict[str, Any]], plain: list[dict[str, Any]]) -> dict[str, Any]:
    decode = [
        r["decode_tokens"] / (r["total"] - r["ttft"])
        for r in runs
        if r["total"] > r["ttft"] and r["decode_tokens"] > 1
    ]
    return {
        "ttft_s": round(statistics.median(r["ttft"] for r in runs), 3),
        "total_s": round(statistics.median(r["total"] for r in runs), 3),
        "decode_tokens_per_s": round(statistics.median(decode), 1) if decode else None,
        "same_answer": sum(r["text"] == p["text"] for r, p in zip(runs, plain, strict=True)),
        "answers": len(runs),
        "ttft_ratio": round(
            statistics.median(r["ttft"] / p["ttft"] for r, p in zip(runs, plain, strict=True)), 3
        ),
        "total_ratio": round(
            statistics.median(r["total"] / p["total"] for r, p in zip(runs, plain, strict=True)),
            3,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--llm", choices=list(PRESETS), default="qwen2.5-coder-1.5b")
    parser.add_argument("--set", default="python-reference")
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--lookup-tokens", type=int, default=10)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    texts, path = prompts(args.llm, args.set, args.questions)
    print(f"{len(texts)} prompts from {args.set} (dev); {path.name}", flush=True)
    variants: dict[str, Any] = {
        "plain": model(path),
        "prompt_lookup": model(path, LlamaPromptLookupDecoding(num_pred_tokens=args.lookup_tokens)),
    }
    if args.llm != QWEN_05B.name:
        settings = Settings.load({"llm": QWEN_05B.name}, os.environ)
        draft = small_model_draft(settings.llm_path(), args.draft_tokens)
        variants["speculative_0.5b"] = model(path, draft)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for n, prompt in enumerate(texts):
        for name, llama in variants.items():
            runs[name].append(timed(llama, prompt))
        row = {name: f"{r[-1]['ttft']:.2f}/{r[-1]['total']:.2f} s" for name, r in runs.items()}
        print(f"{n + 1}/{len(texts)} {row}", flush=True)
    out: dict[str, Any] = {
        "llm": args.llm,
        "set": args.set,
        "questions": len(texts),
        "n_ctx": N_CTX,
        "threads": available_cores(),
        "lookup_tokens": args.lookup_tokens,
        "draft_tokens": args.draft_tokens,
        "variants": {name: summary(r, runs["plain"]) for name, r in runs.items()},
        "answers": {name: [r["text"] for r in rs] for name, rs in runs.items()},
    }
    for name, figures in out["variants"].items():
        print(name, figures, flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
