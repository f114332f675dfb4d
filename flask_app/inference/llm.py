"""The in-process LLM: one model per process, one generation at a time.

`LLM` puts a bounded FIFO in front of a backend: callers wait their turn, a
full queue raises `LLMOverloaded` (the API answers 503 + Retry-After), every
request has a deadline, and a stream that is closed early (client gone) stops
generating and hands the model to the next waiter.

Backends: `LlamaBackend` runs a GGUF through llama-cpp-python; `fakes.ScriptedBackend`
is a fake with the same interface for fast tests of the layers above.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypedDict, cast

import numpy as np
import numpy.typing as npt

from flask_app.errors import Kind, ServiceError
from flask_app.inference import hidden_state
from flask_app.inference.llama_runtime import (
    available_cores,
    model_id_from_metadata,
    route_llama_logs,
)
from flask_app.malloc_tuning import release_free_memory


class ChatMessage(TypedDict):
    role: str
    content: str


class LLMError(ServiceError):
    """Base of every error the LLM layer raises."""

    kind = Kind.MODEL_FAILED


class LLMOverloaded(LLMError):
    """The wait queue is full; try again after `retry_after` seconds."""

    kind = Kind.BUSY
    retry_after: int

    def __init__(self, waiting: int, retry_after: int) -> None:
        super().__init__(
            f"LLM queue is full ({waiting} requests waiting); retry in {retry_after} s"
        )
        self.retry_after = retry_after


class ReplicaLost(LLMError):
    """A model replica of the cluster died (Ray restarts it): retry shortly."""

    kind = Kind.UNAVAILABLE

    def __init__(self, detail: str, retry_after: int = 5) -> None:
        super().__init__(f"a model replica failed ({detail}); retry in {retry_after} s")
        self.retry_after = retry_after


class LLMTimeout(LLMError):
    """The request's deadline passed while waiting or generating."""

    kind = Kind.TIMEOUT


class LLMFailed(LLMError):
    """The model raised while generating (the detail is for the log)."""

    kind = Kind.MODEL_FAILED

    @property
    def public_message(self) -> str:
        return "LLM request failed"


class LLMCancelled(LLMError):
    """The client left while its request waited for the model."""

    kind = Kind.CANCELLED


# How often a waiter and a generation look whether their client is still there.
_ABANDON_POLL_S = 0.25


class Backend(Protocol):
    """What `LLM` needs from a model."""

    @property
    def model_id(self) -> str: ...

    @property
    def n_ctx(self) -> int: ...

    def count_tokens(self, text: str) -> int: ...

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text the chat template makes of `messages`."""
        ...

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
        """Text deltas for `prompt`; closing the iterator stops generation. With
        a `probe`, sets `probe.probability` from the first step's distribution
        before the first delta is yielded; with a `judge`, asks it first and
        sets `judge.probability`; with `hidden`, sets `hidden.states` from the
        prompt's own prefill before the first delta."""
        ...


@dataclass(frozen=True)
class Sampling:
    """How tokens are drawn. `top_k` 0 = no top-k cut; penalties as in OpenAI's API."""

    temperature: float = 0.2
    top_p: float = 0.95
    top_k: int = 40
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    seed: int | None = None  # None: a fresh draw per request


@dataclass
class FirstTokenProbe:
    """How likely the answer was to start with one of `starts` (e.g. the first
    word of a refusal), read from the distribution the first token was drawn
    from: a signal about the answer that costs no extra prompt, so the
    system prompt stays in the KV cache."""

    starts: Sequence[str]
    probability: float | None = None
    top_probability: float | None = None  # the likeliest first token's probability
    entropy: float | None = None  # of the first token's distribution, in nats


@dataclass
class JudgeProbe:
    """A yes/no question put to the model just before it answers: `messages`
    is the answer's own chat with the question appended to the last user
    message, so llama.cpp reuses the evaluated prefix and the judge costs only
    the appended tokens. `probability` is P(yes) / (P(yes) + P(no)) read from
    the first token's distribution."""

    messages: Sequence[ChatMessage]
    probability: float | None = None


@dataclass
class HiddenStateProbe:
    """The model's hidden state at the prompt's last token (where the answer
    starts), read from the answer's own prefill at `layers` (block numbers;
    -1 the final normalised state): what a probe reads whether the documents
    hold the answer. `states` maps each layer to its vector, set before the
    first delta (None: the backend could not read it)."""

    layers: tuple[int, ...]
    states: dict[int, npt.NDArray[np.float32]] | None = None


class LlamaBackend:
    """A GGUF chat model run by llama-cpp-python, prompted through its own chat template."""

    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        model_id: str | None = None,
        seed: int = 0,
        vocab_only: bool = False,
    ) -> None:
        """`vocab_only`: the tokenizer and chat template without the weights
        (counting and rendering only; a cluster's replicas generate)."""
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        route_llama_logs()
        if not path.is_file():
            raise FileNotFoundError(f"LLM model file not found: {path}")
        threads = n_threads or available_cores()
        self._llama = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_batch=512,
            # compute buffers sized for 256 tokens a step: 21 MB less than 512,
            # prompt reading as fast (benches/memory.py, docs/performance.md)
            n_ubatch=256,
            n_threads=threads,
            n_threads_batch=threads,
            seed=seed,
            # llama.cpp repacks most weights for the CPU's SIMD (anonymous
            # memory); from a mapped file the pages it read them from would stay
            # resident too (+187 MB for the 0.5B, benches/memory.py)
            use_mmap=False,
            vocab_only=vocab_only,
            verbose=False,
        )
        self._n_ctx = n_ctx if vocab_only else int(self._llama.n_ctx())
        metadata: dict[str, str] = self._llama.metadata
        template = metadata.get("tokenizer.chat_template")
        if not template:
            raise ValueError(f"{path}: the GGUF has no chat template (tokenizer.chat_template)")
        eos = self._llama.detokenize([self._llama.token_eos()]).decode("utf-8", errors="ignore")
        bos_id = self._llama.token_bos()
        bos = (
            self._llama.detokenize([bos_id]).decode("utf-8", errors="ignore") if bos_id >= 0 else ""
        )
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        self._model_id = model_id or model_id_from_metadata(metadata, path)
        self.path = path
        self._tap: hidden_state.HiddenStateTap | None = None
        if not vocab_only:
            self._tap = hidden_state.HiddenStateTap()
            hidden_state.install(self._llama, self._tap)
        self.n_layers = (
            0 if vocab_only else int(llama_cpp.llama_model_n_layer(self._llama._model.model))
        )

    def _judge(self, judge: JudgeProbe) -> None:
        from llama_cpp import LogitsProcessorList

        yes, no = self._first_tokens(("yes", "Yes")), self._first_tokens(("no", "No"))

        def read(_ids: Any, logits: Any) -> Any:
            if judge.probability is None:
                z = np.exp(logits - logits.max())
                said_yes, said_no = float(z[yes].sum()), float(z[no].sum())
                judge.probability = said_yes / (said_yes + said_no) if said_yes + said_no else 0.5
            return logits

        self._llama.create_completion(
            self.render(judge.messages),
            max_tokens=1,
            temperature=0.0,
            logits_processor=LogitsProcessorList([read]),
        )

    def _first_tokens(self, words: Sequence[str]) -> list[int]:
        return sorted(
            {int(self._llama.tokenize(w.encode(), add_bos=False, special=False)[0]) for w in words}
        )

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def tokens(self, text: str) -> list[int]:
        """`text`'s token ids as a rendered prompt holds them (no BOS added)."""
        ids: list[int] = self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        return ids

    def count_tokens(self, text: str) -> int:
        return len(self.tokens(text))

    def render(self, messages: Sequence[ChatMessage]) -> str:
        rendered = self._formatter(messages=list(messages))  # type: ignore[arg-type]
        return str(rendered.prompt)

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
        # llama-cpp-python reuses the KV cache for the longest prefix shared with
        # the previous prompt, so a stable system prompt is evaluated only once,
        # and the answer after a judge only re-reads the tokens after the question.
        if judge is not None:
            self._judge(judge)
        processors = None
        if probe is not None or hidden is not None:
            from llama_cpp import LogitsProcessorList

            ids = self._first_tokens(probe.starts) if probe is not None else []
            tap = self._tap if hidden is not None else None
            if tap is not None and hidden is not None:
                tap.arm(hidden.layers)
                if self._llama.n_tokens > 0:
                    # a prompt already whole in the KV cache (the same question
                    # again after an answer that stopped at its first token) is
                    # sampled without a decode, leaving no hidden state to read:
                    # one cached token fewer makes llama-cpp-python replay the
                    # prompt's last token
                    self._llama.n_tokens -= 1
            first = [True]

            def read_first_step(_ids: Any, logits: Any) -> Any:
                # runs before the first token is drawn: the prefill is the last decode
                if first[0]:
                    first[0] = False
                    if probe is not None:
                        z = np.exp(logits - logits.max())
                        p = z / z.sum()
                        probe.probability = float(p[ids].sum())
                        probe.top_probability = float(p.max())
                        probe.entropy = float(-(p * np.log(np.maximum(p, 1e-30))).sum())
                    if tap is not None and hidden is not None:
                        hidden.states = tap.take()
                return logits

            processors = LogitsProcessorList([read_first_step])
        chunks = cast(
            Iterator[Any],
            self._llama.create_completion(
                prompt,
                max_tokens=max_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                presence_penalty=sampling.presence_penalty,
                frequency_penalty=sampling.frequency_penalty,
                stop=list(sampling.stop) or None,
                seed=sampling.seed,
                stream=True,
                logits_processor=processors,
            ),
        )
        try:
            for chunk in chunks:
                text = chunk["choices"][0]["text"]
                if text:
                    yield text
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
            if self._tap is not None:
                self._tap.take()  # disarmed, also when no token was drawn


class FifoGate:
    """`capacity` holders at a time (one per model replica); at most
    `max_waiters` queued behind them, served in arrival order."""

    def __init__(self, max_waiters: int, capacity: int = 1) -> None:
        self.max_waiters = max_waiters
        self.capacity = capacity
        self._cond = threading.Condition()
        self._waiters: collections.deque[object] = collections.deque()
        self._holders = 0
        self._mean_hold = 5.0  # seconds; moving average of generation time, seeds Retry-After

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiters)

    @property
    def busy(self) -> bool:
        """Every replica is generating."""
        with self._cond:
            return self._holders >= self.capacity

    @property
    def holders(self) -> int:
        with self._cond:
            return self._holders

    def retry_after(self) -> int:
        return max(1, math.ceil(self._mean_hold * (len(self._waiters) + 1) / self.capacity))

    def acquire(self, deadline: float, abandoned: Callable[[], bool] | None = None) -> None:
        """Wait for a free replica in arrival order. `abandoned()` is polled
        while waiting: a client that left gives its place up (LLMCancelled)."""
        with self._cond:
            full = self._holders >= self.capacity
            if full and len(self._waiters) >= self.max_waiters:
                raise LLMOverloaded(len(self._waiters), self.retry_after())
            ticket = object()
            self._waiters.append(ticket)
            while self._holders >= self.capacity or self._waiters[0] is not ticket:
                remaining = deadline - time.monotonic()
                gone = abandoned is not None and abandoned()
                if remaining <= 0 or gone:
                    self._waiters.remove(ticket)
                    self._cond.notify_all()
                    if gone:
                        raise LLMCancelled("the client left while waiting for the LLM")
                    raise LLMTimeout("timed out waiting for the LLM")
                self._cond.wait(min(remaining, _ABANDON_POLL_S) if abandoned else remaining)
            self._waiters.popleft()
            self._holders += 1
            self._cond.notify_all()  # the next in line may take another free replica

    def release(self, held_for: float) -> None:
        with self._cond:
            self._mean_hold = 0.8 * self._mean_hold + 0.2 * held_for
            self._holders -= 1
            self._cond.notify_all()


class TokenStream:
    """Text deltas of one generation. Holds the model until exhausted or closed."""

    def __init__(
        self,
        tokens: Iterator[str],
        gate: FifoGate,
        deadline: float,
        abandoned: Callable[[], bool] | None = None,
    ) -> None:
        self._tokens = tokens
        self._gate = gate
        self._deadline = deadline
        self._abandoned = abandoned
        self._next_poll = 0.0
        self._started = time.monotonic()
        self._first: float | None = None  # when the first delta came
        self._deltas = 0
        self.observer: Observer | None = None
        self.prompt_tokens = 0  # told to the observer
        self.waited = 0.0  # seconds queued for the model, told to the observer
        self._open = True
        self._cancelled = threading.Event()
        self.cancelled_because_client_left = False

    def __iter__(self) -> TokenStream:
        return self

    def __next__(self) -> str:
        if not self._open:
            raise StopIteration
        if self._cancelled.is_set() or self._client_gone():
            self.close()
            raise StopIteration
        if time.monotonic() > self._deadline:
            self.close()
            raise LLMTimeout("the LLM request exceeded its deadline")
        try:
            delta = next(self._tokens)
        except (StopIteration, LLMError):
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise LLMFailed(f"LLM request failed: {exc}") from exc
        if self._first is None:
            self._first = time.monotonic()
        self._deltas += 1
        return delta

    def _client_gone(self) -> bool:
        if self._abandoned is None:
            return False
        now = time.monotonic()
        if now < self._next_poll:
            return False
        self._next_poll = now + _ABANDON_POLL_S
        if self._abandoned():
            self.cancelled_because_client_left = True
            return True
        return False

    def cancel(self) -> None:
        """Ask the stream to stop at the next token (safe from any thread)."""
        self._cancelled.set()

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            close = getattr(self._tokens, "close", None)
            if close is not None:
                close()
        finally:
            held = time.monotonic() - self._started
            release_free_memory()  # a generation's temporaries, back to the system
            self._gate.release(held)
            if self.observer is not None:
                ttft = None if self._first is None else self._first - self._started
                self.observer(self.prompt_tokens, self.waited, ttft, self._deltas, held)

    def __enter__(self) -> TokenStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Told about every finished generation: (prompt tokens, seconds queued for the
# model, seconds to the first delta or None, deltas generated, seconds the
# model was held). Metrics use it.
Observer = Callable[[int, float, float | None, int, float], None]


class LLM:
    """The model behind the API: queueing, deadlines, streaming and token counting."""

    def __init__(
        self,
        backend: Backend,
        *,
        max_waiters: int = 8,
        timeout: float = 120.0,
        preset: str | None = None,
        replicas: int = 1,
    ) -> None:
        self.backend = backend
        self.preset = preset  # the named model served (None: a --model file)
        self.gate = FifoGate(max_waiters, capacity=replicas)
        self.timeout = timeout
        self.observer: Observer | None = None

    @property
    def model_id(self) -> str:
        return self.backend.model_id

    @property
    def n_ctx(self) -> int:
        return self.backend.n_ctx

    def count_tokens(self, text: str) -> int:
        return self.backend.count_tokens(text)

    def count_chat_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """Tokens the rendered prompt occupies in the context window."""
        return self.backend.count_tokens(self.backend.render(messages))

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int = 256,
        sampling: Sampling = Sampling(),
        timeout: float | None = None,
        probe: FirstTokenProbe | None = None,
        judge: JudgeProbe | None = None,
        hidden: HiddenStateProbe | None = None,
        abandoned: Callable[[], bool] | None = None,
        prompt_tokens: int | None = None,
    ) -> TokenStream:
        """Wait for the model (FIFO), then return its token stream (see
        `FirstTokenProbe` for `probe`, `JudgeProbe` for `judge`,
        `HiddenStateProbe` for `hidden`).
        `prompt_tokens`: the rendered prompt's size when the caller counted it
        already (else it is counted for the metrics observer).

        Raises `LLMOverloaded` at once when the queue is full, `LLMTimeout`
        when the deadline passes before the model is free, and `LLMCancelled`
        when `abandoned()` turns true while waiting; a generation whose client
        is gone stops at its next token.
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        prompt = self.backend.render(messages)
        queued = time.monotonic()
        self.gate.acquire(deadline, abandoned)
        waited = time.monotonic() - queued
        try:
            tokens = self.backend.generate(
                prompt,
                max_tokens=max_tokens,
                sampling=sampling,
                probe=probe,
                judge=judge,
                hidden=hidden,
            )
        except Exception as exc:
            self.gate.release(0.0)
            raise LLMFailed(f"LLM request failed: {exc}") from exc
        stream = TokenStream(tokens, self.gate, deadline, abandoned)
        if self.observer is not None:
            stream.observer = self.observer
            stream.prompt_tokens = (
                self.backend.count_tokens(prompt) if prompt_tokens is None else prompt_tokens
            )
            stream.waited = waited
        return stream

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int = 256,
        sampling: Sampling = Sampling(),
        timeout: float | None = None,
        prompt_tokens: int | None = None,
    ) -> str:
        with self.stream(
            messages,
            max_tokens=max_tokens,
            sampling=sampling,
            timeout=timeout,
            prompt_tokens=prompt_tokens,
        ) as tokens:
            return "".join(tokens)
