"""A row's answer as the server holds it when it weighs the answer.

Rows are written up to 20 tokens; a verifier that reads the state after n
tokens makes the server pause each candidate after n + 1 (the n-th token's
state is computed as the next is drawn), and weigh the log-probabilities and
the words of those n + 1 tokens only. Features fitted on the rows must see
the same cut."""

from __future__ import annotations

import functools
import os
from typing import Any

import llama_cpp

from flask_app.inference.llama_runtime import route_llama_logs
from flask_app.inference.presets import PRESETS
from flask_app.rag import verifier
from flask_app.settings import Settings


def read_after(reads: str) -> int | None:
    """n for a state read after n tokens ("at<n>"); None for the others."""
    return int(reads[2:]) if reads.startswith("at") else None


def served_tokens(reads: str) -> int | None:
    """How many of a candidate's tokens the server holds when it reads it
    (None: all of them)."""
    n = read_after(reads)
    return None if n is None else verifier.held_tokens(n)


@functools.lru_cache(maxsize=2)
def _vocabulary(llm: str) -> llama_cpp.Llama:
    settings = Settings.load({}, os.environ)
    path = PRESETS[llm].path(settings.model_dir, settings.quant)
    route_llama_logs()
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def cut(llm: str, candidate: dict[str, Any], served: int | None) -> tuple[str, list[float]]:
    """The candidate's text and token log-probabilities, cut where the
    server reads them."""
    logprobs = list(candidate.get("logprobs") or [])
    tokens = int(candidate.get("tokens", len(logprobs)))
    return _cut_text(llm, str(candidate["text"]).strip(), tokens, served), logprobs[:served]


@functools.lru_cache(maxsize=65536)
def _cut_text(llm: str, text: str, tokens: int, served: int | None) -> str:
    # the model's tokenizer is loaded only when a candidate is longer than the cut
    if served is None or tokens <= served:
        return text
    vocabulary = _vocabulary(llm)
    ids = vocabulary.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    return vocabulary.detokenize(ids[:served]).decode("utf-8", errors="ignore").strip()
