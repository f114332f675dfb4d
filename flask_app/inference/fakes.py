"""Fakes with the interfaces of the real models, for fast tests of the layers above:
`ScriptedBackend` (an LLM backend whose model answers from a script, decoded by
the real `BatchEngine`) and `HashEmbedder` (a deterministic bag-of-words embedder)."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from flask_app.inference.embed import Vectors, check_lengths, normalise
from flask_app.inference.engine import BatchEngine, Entry, Finish, Job, Request, State
from flask_app.inference.llm import ChatMessage
from flask_app.inference.sampler import Logits, Sampling

ASSISTANT = "<|assistant|>\n"  # where a rendered prompt ends and the answer begins
END = 0  # the token that ends an answer
VOCAB = 8192
REFUSAL_START = "Sorry"  # the piece a refusal's first-token probability lands on


def pieces(text: str) -> list[str]:
    """The fake's tokens: each word with the spaces before it."""
    return re.findall(r"\s*\S+|\s+", text)


# a script: the replies to a rendered prompt, each with its weight (the
# likeliest is the greedy answer; sampled branches draw among them)
Replies = Callable[[str], Sequence[tuple[str, float]]]


class FakeDecoder:
    """`engine.Decoder` of a scripted model: each sequence's cells are kept
    as tokens; the logits after a prompt put the replies' first pieces at
    their weights, and after a reply's pieces, its next piece (or the end)."""

    def __init__(self, backend: ScriptedBackend) -> None:
        self._backend = backend
        self._cells: dict[int, dict[int, int]] = {}
        self._last: list[Entry] = []

    def decode(
        self, entries: Sequence[Entry], layers: tuple[int, ...]
    ) -> dict[int, dict[int, State]]:
        backend = self._backend
        if backend.token_delay:
            time.sleep(backend.token_delay)
        for token, position, seq, _ in entries:
            self._cells.setdefault(seq, {})[position] = token
        self._last = list(entries)
        states: dict[int, dict[int, State]] = {layer: {} for layer in layers}
        for i, (_, _, seq, wants) in enumerate(entries):
            if not wants:
                continue
            prompt, answer = self._split(seq)
            if not answer:
                backend.prompts.append(prompt)
            elif backend.fail_after is not None and len(pieces(answer)) >= backend.fail_after:
                raise RuntimeError("scripted failure")
            state = backend.state_of(prompt, answer)
            if state is not None:
                for layer in layers:
                    states[layer][i] = state
        return states

    def _text(self, seq: int) -> str:
        cells = self._cells.get(seq, {})
        return "".join(self._backend.vocab[cells[p]] for p in sorted(cells))

    def _split(self, seq: int) -> tuple[str, str]:
        text = self._text(seq)
        at = text.rfind(ASSISTANT)
        cut = len(text) if at < 0 else at + len(ASSISTANT)
        return text[:cut], text[cut:]

    def logits(self, index: int) -> Logits:
        """The replies that agree with the answer so far share the next
        step by their weights: their next pieces (or the end)."""
        backend = self._backend
        prompt, answer = self._split(self._last[index][2])
        said = pieces(answer)
        following: dict[int, float] = {}
        for text, weight in backend.replies_to(prompt):
            parts = pieces(text)
            if parts[: len(said)] == said:
                token = backend.token(parts[len(said)]) if len(parts) > len(said) else END
                following[token] = following.get(token, 0.0) + weight
        if not following:  # off script (a stop string cut it): end here
            following = {END: 1.0}
        total = sum(following.values())
        chances = {token: weight / total for token, weight in following.items()}
        refusal = backend.refusal_probability
        if not said and refusal > 0 and backend.token(REFUSAL_START) not in chances:
            chances = {t: p * (1 - refusal) for t, p in chances.items()}
            chances[backend.token(REFUSAL_START)] = refusal
        out = np.full(VOCAB, -1e9, dtype=np.float32)
        for token, chance in chances.items():
            out[token] = float(np.log(max(chance, 1e-12)))
        return out

    def seq_rm(self, seq: int, start: int) -> None:
        cells = self._cells.get(seq, {})
        for position in [p for p in cells if p >= start]:
            del cells[position]

    def seq_cp(self, source: int, target: int, end: int) -> None:
        cells = self._cells.setdefault(target, {})
        for position, token in self._cells.get(source, {}).items():
            if position < end:
                cells[position] = token

    def is_end(self, token: int) -> bool:
        return token == END

    def piece(self, token: int) -> bytes:
        return self._backend.vocab[token].encode("utf-8")


class RecordingEngine(BatchEngine):
    """The real engine, remembering each request and its job (tests read
    what was asked, and what was stopped)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.jobs: list[Job] = []

    @property
    def requests(self) -> list[Request]:
        return [job.request for job in self.jobs]

    def submit(self, request: Request) -> Job:
        job = super().submit(request)
        self.jobs.append(job)
        return job

    @property
    def closed_early(self) -> int:
        """Jobs closed before every branch ended by itself (a client gone,
        a deadline, a loop cut short)."""
        with self.cond:
            return sum(
                job.closed
                and (not job.branches or any(r.finish is Finish.CLOSED for r in job.branches))
                for job in self.jobs
            )


class ScriptedBackend:
    """A fake model: answers from a script, one whitespace-delimited piece per token.

    `reply` is a fixed string or a function of the rendered prompt;
    `candidates` (a function of the prompt) gives the weighted replies sampled
    branches draw among (default: `reply` alone); `token_delay` slows each
    step; `fail_after` raises after that many tokens of an answer;
    `refusal_probability` is what the first step gives a refusal's start;
    `hidden_state` (of the prompt) and `answer_state` (of the prompt and the
    answer so far) are the hidden states at every layer (None: not read).
    """

    def __init__(
        self,
        reply: str | Callable[[str], str] = "This is a scripted answer.",
        *,
        candidates: Replies | None = None,
        token_delay: float = 0.0,
        fail_after: int | None = None,
        model_id: str = "scripted-fake",
        n_ctx: int = 4096,
        n_seq: int = 8,
        refusal_probability: float = 0.0,
        hidden_state: Callable[[str], Sequence[float]] | None = None,
        answer_state: Callable[[str, str], Sequence[float]] | None = None,
    ) -> None:
        self._reply = reply
        self._candidates = candidates
        self.refusal_probability = refusal_probability
        self.hidden_state = hidden_state
        self.answer_state = answer_state
        self.token_delay = token_delay
        self.fail_after = fail_after
        self._model_id = model_id
        self._n_ctx = n_ctx
        self.prompts: list[str] = []  # each prompt as the model read it
        self.vocab = ["<end>"]
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()
        self.replica_count = 1
        self.engine = RecordingEngine(FakeDecoder(self), n_seq=n_seq, n_batch=512)

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def requests(self) -> list[Request]:
        return self.engine.requests

    @property
    def closed_early(self) -> int:
        return self.engine.closed_early

    @property
    def samplings(self) -> list[Sampling]:
        """The first branch's sampling of each request."""
        return [r.branches[0].sampling for r in self.engine.requests]

    def token(self, piece: str) -> int:
        with self._lock:
            if piece not in self._ids:
                if len(self.vocab) >= VOCAB:
                    raise RuntimeError("the scripted model's vocabulary is full")
                self._ids[piece] = len(self.vocab)
                self.vocab.append(piece)
            return self._ids[piece]

    def tokens(self, text: str) -> list[int]:
        return [self.token(p) for p in pieces(text)]

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def first_tokens(self, words: Sequence[str]) -> tuple[int, ...]:
        return tuple(sorted({self.token(w) for w in words} | {self.token(REFUSAL_START)}))

    def render(self, messages: Sequence[ChatMessage]) -> str:
        return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + ASSISTANT

    def replies_to(self, prompt: str) -> Sequence[tuple[str, float]]:
        reply = self._reply(prompt) if callable(self._reply) else self._reply
        if self._candidates is None:
            return [(reply, 1.0)]
        return self._candidates(prompt)

    def state_of(self, prompt: str, answer: str) -> State | None:
        if not answer:
            fn = self.hidden_state
            return None if fn is None else np.asarray(fn(prompt), dtype=np.float32)
        fn2 = self.answer_state
        return None if fn2 is None else np.asarray(fn2(prompt, answer), dtype=np.float32)

    def close(self) -> None:
        self.engine.stop()


class HashEmbedder:
    """Deterministic fake: each lower-cased word maps to a fixed random vector;
    a text is the normalised sum of its words, so shared words mean similarity."""

    def __init__(self, dim: int = 384, max_tokens: int = 512) -> None:
        self._dim = dim
        self._max_tokens = max_tokens

    @property
    def model_id(self) -> str:
        return f"hash-fake-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    @staticmethod
    def _words(text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())

    def count_tokens(self, text: str) -> int:
        return len(self._words(text)) + 2

    def tokens(self, text: str) -> list[str]:
        return ["[CLS]", *self._words(text), "[SEP]"]

    def _word_vector(self, word: str) -> Vectors:
        seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self._dim).astype(np.float32)

    def embed(self, texts: Sequence[str], ids: Sequence[str] | None = None) -> Vectors:
        check_lengths(self, texts, ids)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in self._words(text):
                out[i] += self._word_vector(word)
        return normalise(out)
