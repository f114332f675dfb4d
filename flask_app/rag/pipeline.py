"""The pipeline's building blocks: the question, query vectors, dense
retrieval (for /search), fitting text to a token budget, prompt assembly and
the cleaned token stream. `rag.answer` puts them together into grounded answers.

Each step is a separate function so it can be tested alone. The core knows
nothing about HTTP: it raises `RagError` subclasses that the surfaces map.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from flask_app.errors import ServiceError
from flask_app.inference.embed import Embedder, EmbeddingError
from flask_app.inference.llm import LLM, ChatMessage, Sampling
from flask_app.rag import prompts
from flask_app.store import Hit
from flask_app.store.protocols import VectorCollection

Vector = npt.NDArray[np.float32]


class RagError(ServiceError):
    """A request the pipeline cannot serve; the message says why."""


class LLMNotConfigured(RagError):
    def __init__(self) -> None:
        super().__init__(
            "LLM is not configured: the server was started with --no-llm; restart it without "
            "--no-llm (`edgerag pull` fetches the default model) or with --model PATH.gguf"
        )


class QueryError(RagError):
    """The query cannot be turned into a vector for this collection."""


class ContextOverflow(RagError):
    """Prompts, history and question leave no room in the context window."""

    code = "context_overflow"


@dataclass(frozen=True)
class Question:
    """Everything a surface passes to the pipeline."""

    query: str
    query_vector: Vector | None = None
    top_k: int = 5
    min_cosine: float | None = None  # passages below this similarity are dropped
    metadata: Mapping[str, Any] | None = None
    header_prompt: str | None = None
    footer_prompt: str | None = None
    chat_history: Sequence[ChatMessage] = field(default_factory=list)
    sampling: Sampling = field(default_factory=Sampling)
    form: prompts.AnswerForm = prompts.DEFAULT_FORM


@dataclass(frozen=True)
class Prompt:
    messages: list[ChatMessage]
    sources: list[Hit]  # the passages actually in the prompt (score = cosine)
    prompt_tokens: int


# --- retrieval -----------------------------------------------------------------


def query_vector(
    collection: VectorCollection,
    question: Question,
    embedder: Embedder | None,
    field: str = "query_vector",
) -> Vector:
    """The question's vector: the one given (named `field` in errors), or the
    server's embedding of its text."""
    info = collection.info()
    if question.query_vector is not None:
        if info.dimension is not None and len(question.query_vector) != info.dimension:
            raise QueryError(
                f"{field} has {len(question.query_vector)} dimensions, "
                f"the store has {info.dimension}"
            )
        return question.query_vector
    if not question.query.strip():
        raise QueryError("query: empty text")
    if embedder is None:
        raise QueryError(
            "query: text queries need the server's embedding model (it was started with "
            "--no-embedder); send a query vector"
        )
    if info.dimension is not None and info.dimension != embedder.dim:
        raise QueryError(
            f"query: the store holds {info.dimension}-dimensional vectors but the server's "
            f"embedder {embedder.model_id!r} makes {embedder.dim}-dimensional ones; "
            f"send a {info.dimension}-dimensional query vector instead of text"
        )
    if info.dimension is not None and info.mode == "vector" and info.embedding_model is None:
        raise QueryError(
            "query: the store holds client vectors of an unknown model, so a text query "
            "cannot be embedded to match them; send a query vector (or upload with "
            f"embedding_model {embedder.model_id!r} when the vectors come from that model)"
        )
    if info.embedding_model not in (None, embedder.model_id):
        raise QueryError(
            f"query: the store holds vectors from {info.embedding_model!r}, not the server's "
            f"embedder {embedder.model_id!r}; send a query vector from the same model"
        )
    try:
        embedded: Vector = embedder.embed([question.query])[0]
    except EmbeddingError as exc:
        raise QueryError(f"query: {exc}") from None
    return embedded


def retrieve(collection: VectorCollection, vector: Vector, question: Question) -> list[Hit]:
    """Top-k passages by cosine (dense only), best first, minus those under
    `question.min_cosine`."""
    if collection.info().dimension is None:
        return []
    hits = collection.search(vector, question.top_k, metadata=question.metadata)
    floor = question.min_cosine
    return [h for h in hits if floor is None or h.score >= floor]


# --- fitting passages to the budget ---------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


def cut_to_tokens(text: str, limit: int, count: Callable[[str], int]) -> str:
    """The longest prefix of whole sentences within `limit` tokens (whole words
    when not even the first sentence fits); "" when nothing fits."""
    if count(text) <= limit:
        return text
    # Each sentence is counted once (+1 for the joining space), so a long
    # passage costs one pass, not one per prefix; build_prompt re-counts the
    # whole prompt and trims again if joins tokenized differently.
    kept: list[str] = []
    used = -1
    for sentence in _SENTENCE_END.split(text.strip()):
        size = count(sentence) + 1
        if used + size > limit:
            break
        kept.append(sentence)
        used += size
    if kept:
        return " ".join(kept)
    words = text.split()
    lo, hi = 0, len(words)
    while lo < hi:  # binary search on the number of words
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def fit_passages(
    texts: Sequence[str],
    budget: int,
    count: Callable[[str], int],
    labels: Sequence[str] | None = None,
) -> list[str]:
    """Passages in order while they fit in `budget` tokens (with their labels);
    the first that does not fit is cut on a sentence boundary and ends the list."""
    out: list[str] = []
    used = 0
    for i, text in enumerate(texts, 1):
        label = labels[i - 1] if labels is not None else f"Document {i}:"
        overhead = count(f"{label}\n\n\n")
        room = budget - used - overhead
        if room <= 0:
            break
        size = count(text)
        if size <= room:
            out.append(text)
            used += size + overhead
            continue
        cut = cut_to_tokens(text, room, count)
        if cut:
            out.append(cut)
        break
    return out


# --- prompt ----------------------------------------------------------------------


def build_messages(
    question: Question, passages: Sequence[str], sources: Sequence[Hit] | None = None
) -> list[ChatMessage]:
    """The chat: system prompt, history, then passages (labelled by the
    question's form from `sources`, one per passage) and the question."""
    form = question.form
    system = question.header_prompt if question.header_prompt else form.system
    if sources is None:
        labels = [form.label(i, str(i), None) for i in range(len(passages))]
    else:
        labels = [form.label(i, s.id, s.metadata) for i, s in enumerate(sources[: len(passages)])]
    messages: list[ChatMessage] = [{"role": "system", "content": system}]
    messages += [{"role": m["role"], "content": m["content"]} for m in question.chat_history]
    messages.append(
        {
            "role": "user",
            "content": prompts.user_message(
                labels, passages, question.query, question.footer_prompt
            ),
        }
    )
    return messages


def recent_history(
    turns: Sequence[ChatMessage], budget: int, count: Callable[[str], int]
) -> list[ChatMessage]:
    """The newest whole exchanges whose text fits in `budget` tokens. Turns are
    counted newest first, once each, and counting stops at the first that does
    not fit: the cost follows the window, not the size of the history sent."""
    kept = 0
    used = 0
    for turn in reversed(turns):
        used += count(turn["content"]) + 4  # + role markers
        if used > budget:
            break
        kept += 1
    if kept % 2 and kept < len(turns):
        kept -= 1  # keep user/assistant exchanges whole
    return list(turns[len(turns) - kept :]) if kept else []


def build_prompt(
    llm: LLM,
    question: Question,
    sources: Sequence[Hit],
    *,
    texts: Sequence[str] | None = None,
    answer_tokens: int,
    context_tokens: int,
) -> Prompt:
    """Fit as many passages as the budget allows: at most `context_tokens` of
    passage text, and never more than the window leaves after the prompts,
    the history, the question and `answer_tokens` for the answer. `texts`
    (one per source) replaces the sources' whole text, e.g. their evidence."""
    count = llm.count_tokens
    history = recent_history(question.chat_history, llm.n_ctx - answer_tokens, count)
    trial = replace(question, chat_history=history)
    while True:
        fixed = llm.count_chat_tokens(build_messages(trial, []))
        room = llm.n_ctx - answer_tokens - fixed
        if room >= 64 or not history:
            break
        history = history[2:]  # drop the oldest exchange
        trial = replace(question, chat_history=history)
    if room < 16:
        raise ContextOverflow(
            f"the prompts and question take {fixed} tokens; with {answer_tokens} for the answer "
            f"they do not fit the {llm.n_ctx}-token context window"
        )
    all_texts = list(texts) if texts is not None else [s.text for s in sources]
    labels = [question.form.label(i, s.id, s.metadata) for i, s in enumerate(sources)]
    budget = min(room, context_tokens)
    for _ in range(4):
        texts = fit_passages(all_texts, budget, count, labels)
        messages = build_messages(trial, texts, sources)
        total = llm.count_chat_tokens(messages)
        # parts and whole can tokenize a few tokens apart: the whole must fit
        overflow = total + answer_tokens - llm.n_ctx
        if overflow <= 0:
            return Prompt(messages, list(sources[: len(texts)]), total)
        budget -= overflow + 8
    raise ContextOverflow(f"could not fit the passages into the {llm.n_ctx}-token window")


# --- generation ----------------------------------------------------------------


def clean_stream(tokens: Iterator[str]) -> Iterator[str]:
    """Drop leading whitespace of the answer; every other delta passes through,
    so the deltas always join to exactly the final answer."""
    started = False
    for delta in tokens:
        if not started:
            delta = delta.lstrip()
            if not delta:
                continue
            started = True
        yield delta
