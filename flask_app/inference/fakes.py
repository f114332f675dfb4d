"""Fakes with the interfaces of the real models, for fast tests of the layers above:
`ScriptedBackend` (an LLM backend that answers from a script) and `HashEmbedder`
(a deterministic bag-of-words embedder)."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Generator, Iterator, Sequence

import numpy as np

from flask_app.inference.embed import Vectors, check_lengths, normalise
from flask_app.inference.llm import (
    ChatMessage,
    FirstTokenProbe,
    HiddenStateProbe,
    JudgeProbe,
    Sampling,
)


class ScriptedBackend:
    """A fake model: answers from a script, one whitespace-delimited piece per token.

    `reply` is a fixed string or a function of the rendered prompt; `token_delay`
    slows each token; `fail_after` raises after that many tokens.
    """

    def __init__(
        self,
        reply: str | Callable[[str], str] = "This is a scripted answer.",
        *,
        token_delay: float = 0.0,
        fail_after: int | None = None,
        model_id: str = "scripted-fake",
        n_ctx: int = 4096,
        refusal_probability: float = 0.0,
        judge_probability: float = 1.0,
        hidden_state: Callable[[str], Sequence[float]] | None = None,
    ) -> None:
        self._reply = reply
        self.refusal_probability = refusal_probability  # what a first-token probe reads
        self.judge_probability = judge_probability  # what a judge reads (P(yes))
        # what a hidden-state probe reads at every layer, from the rendered prompt
        # (None: a backend that cannot read it)
        self.hidden_state = hidden_state
        self.judged: list[str] = []  # the rendered judge prompts
        self.token_delay = token_delay
        self.fail_after = fail_after
        self._model_id = model_id
        self._n_ctx = n_ctx
        self.prompts: list[str] = []
        self.samplings: list[Sampling] = []
        self.closed_early = 0

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def render(self, messages: Sequence[ChatMessage]) -> str:
        return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int,
        sampling: Sampling,
        probe: FirstTokenProbe | None,
        judge: JudgeProbe | None = None,
        hidden: HiddenStateProbe | None = None,
    ) -> Iterator[str]:
        return _Reply(self, self._run(prompt, max_tokens, sampling, probe, judge, hidden))

    def _run(
        self,
        prompt: str,
        max_tokens: int,
        sampling: Sampling,
        probe: FirstTokenProbe | None,
        judge: JudgeProbe | None,
        hidden: HiddenStateProbe | None,
    ) -> Generator[str, None, None]:
        """The generation, from its first next() on (as llama.cpp's: nothing
        is read or recorded before)."""
        if judge is not None:
            self.judged.append(self.render(judge.messages))
            judge.probability = self.judge_probability
        self.prompts.append(prompt)
        self.samplings.append(sampling)
        if probe is not None:
            probe.probability = self.refusal_probability
        if hidden is not None and self.hidden_state is not None:
            state = np.asarray(self.hidden_state(prompt), dtype=np.float32)
            hidden.states = {layer: state for layer in hidden.layers}
        reply = self._reply(prompt) if callable(self._reply) else self._reply
        pieces = [p for p in reply.replace(" ", "\0 ").split("\0") if p][:max_tokens]
        finished = False
        try:
            for i, piece in enumerate(pieces):
                if self.fail_after is not None and i >= self.fail_after:
                    raise RuntimeError("scripted failure")
                if self.token_delay:
                    time.sleep(self.token_delay)
                yield piece
            finished = True
        finally:
            if not finished:
                self.closed_early += 1


class _Reply:
    """A scripted generation's pieces. Closed before its first piece it
    counts as closed early too (a generator never started runs no
    `finally`): a generation stopped before it began is stopped all the same."""

    def __init__(self, backend: ScriptedBackend, run: Generator[str, None, None]) -> None:
        self._backend = backend
        self._run = run
        self._started = False

    def __iter__(self) -> _Reply:
        return self

    def __next__(self) -> str:
        self._started = True
        return next(self._run)

    def close(self) -> None:
        if not self._started:
            self._backend.closed_early += 1
            self._started = True
        self._run.close()


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
