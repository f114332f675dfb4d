"""Text → L2-normalised float32 vectors.

`LlamaEmbedder` runs a GGUF embedding model (BERT-family, pooled by llama.cpp)
in-process (`fakes.HashEmbedder` is its test double). Both reject
texts longer than the model's token limit instead of truncating them silently.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from flask_app.inference.llama_runtime import (
    available_cores,
    model_id_from_metadata,
    route_llama_logs,
)

Vectors = npt.NDArray[np.float32]


class EmbeddingError(ValueError):
    """A text cannot be embedded (too long, empty)."""


class TextTooLong(EmbeddingError):
    def __init__(self, label: str, tokens: int, limit: int, model_id: str) -> None:
        super().__init__(
            f"{label} has {tokens} tokens (max {limit} for {model_id}); "
            "shorten it or split it into smaller pieces"
        )
        self.label = label
        self.tokens = tokens
        self.limit = limit


class EmbedderBusy(Exception):
    """The embedder stayed busy past the caller's deadline."""


class Embedder(Protocol):
    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    def count_tokens(self, text: str) -> int: ...

    def tokens(self, text: str) -> list[str]:
        """The tokens the model sees, WordPiece-style ("[CLS]", "token", "##ization")."""
        ...

    def embed(self, texts: Sequence[str], ids: Sequence[str] | None = None) -> Vectors:
        """One unit-length row per text; `ids` name the texts in errors."""
        ...


def _label(i: int, text: str, ids: Sequence[str] | None) -> str:
    if ids is not None:
        return f'"{ids[i]}"'
    preview = text if len(text) <= 40 else text[:37] + "..."
    return f"text {i} ({preview!r})"


def check_lengths(embedder: Embedder, texts: Sequence[str], ids: Sequence[str] | None) -> None:
    """Validate every text before any is embedded, so a batch fails as a whole."""
    if ids is not None and len(ids) != len(texts):
        raise EmbeddingError(f"{len(ids)} ids for {len(texts)} texts")
    for i, text in enumerate(texts):
        if not text.strip():
            raise EmbeddingError(f"{_label(i, text, ids)} is empty")
        n = embedder.count_tokens(text)
        if n > embedder.max_tokens:
            raise TextTooLong(_label(i, text, ids), n, embedder.max_tokens, embedder.model_id)


def normalise(rows: Vectors) -> Vectors:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (rows / norms).astype(np.float32)
    return out


class LlamaEmbedder:
    """A GGUF embedding model run by llama-cpp-python, one sequence per decode.

    (llama-cpp-python 0.3.16 creates single-sequence contexts, so texts are
    decoded one after another; calls are serialised by a lock.)
    """

    def __init__(
        self, path: Path, *, n_threads: int | None = None, lock_timeout: float = 60.0
    ) -> None:
        import llama_cpp

        route_llama_logs()
        if not path.is_file():
            raise FileNotFoundError(f"embedding model file not found: {path}")
        threads = n_threads or available_cores()
        # n_ctx=0 sizes the context (and the batch, capped below) to the
        # model's training length: a whole text is one batch, never truncated.
        self._llama = llama_cpp.Llama(
            model_path=str(path),
            embedding=True,
            n_ctx=0,
            n_batch=8192,
            n_ubatch=8192,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        self._model_id = model_id_from_metadata(self._llama.metadata, path)
        self._dim = int(self._llama.n_embd())
        self._max_tokens = int(self._llama.n_ctx())
        self._lock = threading.Lock()
        self._lock_timeout = lock_timeout
        self.path = path

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def count_tokens(self, text: str) -> int:
        """Tokens including the [CLS]/[SEP] the model adds."""
        return len(self._llama.tokenize(text.strip().encode("utf-8"), add_bos=True))

    def tokens(self, text: str) -> list[str]:
        import llama_cpp

        vocab = self._llama._model.vocab
        out = []
        for token in self._llama.tokenize(text.strip().encode("utf-8"), add_bos=True):
            piece = llama_cpp.llama_token_get_text(vocab, token).decode("utf-8", "replace")
            # the GGUF marks word starts with "▁"; BERT marks continuations with "##"
            if piece.startswith("\u2581"):
                out.append(piece[1:])
            elif piece.startswith("[") and piece.endswith("]"):
                out.append(piece)
            else:
                out.append("##" + piece)
        return out

    def embed(self, texts: Sequence[str], ids: Sequence[str] | None = None) -> Vectors:
        check_lengths(self, texts, ids)
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        if not self._lock.acquire(timeout=self._lock_timeout):
            raise EmbedderBusy(
                f"the embedding model stayed busy for {self._lock_timeout:g} s; retry later"
            )
        try:
            for i, text in enumerate(texts):
                out[i] = self._llama.embed(text.strip(), truncate=False)
        finally:
            self._lock.release()
        return normalise(out)
