"""Text → L2-normalised float32 vectors.

`LlamaEmbedder` runs a GGUF embedding model in-process (`fakes.HashEmbedder`
is its test double). Both reject texts longer than the model's token limit
instead of truncating them silently.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from flask_app.errors import Kind, ServiceError
from flask_app.inference.bert_encoder import BertEncoder, UnsupportedModel
from flask_app.inference.llama_runtime import (
    available_cores,
    model_id_from_metadata,
    route_llama_logs,
)

Vectors = npt.NDArray[np.float32]


class EmbeddingError(ServiceError, ValueError):
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


class EmbedderBusy(ServiceError):
    """The embedder stayed busy past the caller's deadline."""

    kind = Kind.BUSY
    retry_after = 1


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
    """A GGUF embedding model: llama.cpp tokenizes; a BERT runs batched in NumPy.

    A BERT-architecture GGUF (the default all-MiniLM) is computed by
    `BertEncoder`, many texts per matrix product; any other architecture, or
    `batched=False`, is decoded by llama.cpp one text per call. Calls are
    serialised by a lock.
    """

    def __init__(
        self,
        path: Path,
        *,
        n_threads: int | None = None,
        lock_timeout: float = 60.0,
        batched: bool = True,
        idle_threads: int | None = None,
        lend_idle_threads: Callable[[], bool] = lambda: False,
    ) -> None:
        """`n_threads` compute each step; `idle_threads` while
        `lend_idle_threads()` says the cores are free (the LLM is idle)."""
        import llama_cpp

        route_llama_logs()
        if not path.is_file():
            raise FileNotFoundError(f"embedding model file not found: {path}")
        self._threads = n_threads or available_cores()
        self._idle_threads = idle_threads or self._threads
        self._lend_idle_threads = lend_idle_threads
        self._encoder: BertEncoder | None = None
        if batched:
            try:
                self._encoder = BertEncoder(path)
            except UnsupportedModel:
                self._encoder = None
        # n_ctx=0 sizes the context (and the batch, capped below) to the
        # model's training length: a whole text is one batch, never truncated.
        # With the encoder, llama.cpp only tokenizes (its context needs a size).
        self._llama = llama_cpp.Llama(
            model_path=str(path),
            embedding=True,
            vocab_only=self._encoder is not None,
            n_ctx=0 if self._encoder is None else self._encoder.max_tokens,
            n_batch=8192,
            n_ubatch=8192,
            n_threads=self._threads,
            n_threads_batch=self._threads,
            verbose=False,
        )
        # freed at exit before the interpreter's teardown (llama_backend._free)
        weakref.finalize(self, self._llama.close)
        self._model_id = model_id_from_metadata(self._llama.metadata, path)
        if self._encoder is not None:
            self._dim = self._encoder.dim
            self._max_tokens = self._encoder.max_tokens
        else:
            self._dim = int(self._llama.n_embd())
            self._max_tokens = int(self._llama.n_ctx())
        self._lock = threading.Lock()
        self._lock_timeout = lock_timeout
        self.path = path

    def _step_threads(self) -> int:
        return self._idle_threads if self._lend_idle_threads() else self._threads

    @property
    def batched(self) -> bool:
        return self._encoder is not None

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def _token_ids(self, text: str) -> list[int]:
        ids: list[int] = self._llama.tokenize(text.strip().encode("utf-8"), add_bos=True)
        return ids

    def count_tokens(self, text: str) -> int:
        """Tokens including the [CLS]/[SEP] the model adds."""
        return len(self._token_ids(text))

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
            if self._encoder is not None:
                token_ids = [self._token_ids(text) for text in texts]
                out[:] = self._encoder.encode(token_ids, self._step_threads)
            else:
                for i, text in enumerate(texts):
                    out[i] = self._llama.embed(text.strip(), truncate=False)
        finally:
            self._lock.release()
        return normalise(out)
