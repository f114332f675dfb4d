"""benches/batched_decode.py's two schedules against a fake llama.cpp context
whose next token is a function of everything its sequence holds: answered
together, every request must get the answer it gets alone, which holds only
if every token lands at its position in its own sequence and a copied prompt
start is the donor's."""

from __future__ import annotations

import hashlib
from typing import Any, cast

import pytest

from benches.batched_decode import N_BATCH, Engine, one_after_another, shared, together

EOS = 0


class FakeLib:
    """The llama_cpp calls the schedules make, over `FakeEngine.cache`."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def llama_get_memory(self, _ctx: Any) -> str:
        return "memory"

    def llama_memory_seq_rm(self, _mem: str, seq: int, start: int, end: int) -> None:
        assert end == -1
        del self.engine.cache.setdefault(seq, [])[start:]

    def llama_memory_seq_cp(self, _mem: str, src: int, dst: int, start: int, end: int) -> None:
        assert start == 0 and self.engine.cache.get(dst, []) == []
        assert len(self.engine.cache[src]) >= end, "copied more than the donor holds"
        self.engine.cache[dst] = self.engine.cache[src][:end]


class FakeEngine:
    def __init__(self, answer_length: int = 6) -> None:
        self.lib = FakeLib(self)
        self.ctx = None
        self.eos = {EOS}
        self.cache: dict[int, list[int]] = {}
        self.answer_length = answer_length
        self.outputs: list[int] = []
        self.steps: list[int] = []

    def tokens(self, prompt: str) -> list[int]:
        return [1 + ord(c) for c in prompt]

    def clear(self) -> None:
        self.cache = {}

    def _next(self, held: list[int]) -> int:
        digest = hashlib.sha256(repr(held).encode()).digest()
        # answers end after a length that depends on the prompt
        if len(held) % 7 == 0 or digest[0] < 256 // self.answer_length:
            return EOS
        return 2 + digest[1]

    def decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        assert 0 < len(entries) <= N_BATCH + 8
        self.steps.append(len(entries))
        self.outputs = []
        for token, pos, seq, logits in entries:
            held = self.cache.setdefault(seq, [])
            assert pos == len(held), f"sequence {seq}: token at {pos}, {len(held)} held"
            held.append(token)
            self.outputs.append(self._next(held) if logits else -1)

    def argmax(self, index: int) -> int:
        out = self.outputs[index] if index >= 0 else self.outputs[-1]
        assert out != -1, "logits read where none were asked for"
        return out


def fake(answer_length: int = 6) -> Engine:
    return cast(Engine, FakeEngine(answer_length))


PROMPTS = [
    "SYSTEM: answer from the notes. NOTES: museum closed Mondays; wifi Calder-Guest. Q: wifi?",
    "SYSTEM: answer from the notes. NOTES: museum closed Mondays; wifi Calder-Guest. Q: closed?",
    "SYSTEM: answer from the notes. NOTES: the bridge opened in 1998. Q: when did it open?",
    "SYSTEM: answer from the notes. NOTES: museum closed Mondays; wifi Calder-Guest. Q: price?",
    "other system prompt entirely, Q: hours?",
]


def test_shared_keeps_the_last_prompt_token_to_read() -> None:
    assert shared([1, 2, 3], [1, 2, 4]) == 2
    assert shared([1, 2, 3], [1, 2, 3]) == 2
    assert shared([1, 2, 3], []) == 0


@pytest.mark.parametrize("clients", [1, 2, 4, 5])
@pytest.mark.parametrize("chunk", [4, 64])
def test_together_answers_as_one_after_another(clients: int, chunk: int) -> None:
    texts = PROMPTS[:clients]
    alone = one_after_another(fake(), texts, max_tokens=16)
    engine = FakeEngine()
    both = together(cast(Engine, engine), texts, max_tokens=16, chunk=chunk)
    assert both["tokens"] == alone["tokens"]
    assert all(t is not None for t in both["ttft_s"])
    assert any(alone["tokens"]), "the fake answers something"
    if clients > 1:
        # the later prompts read only what no earlier one holds
        read = sum(engine.steps) - sum(len(t) for t in both["tokens"])
        assert read < sum(len(engine.tokens(t)) for t in texts)


def test_answers_stop_at_max_tokens() -> None:
    texts = PROMPTS[:2]
    alone = one_after_another(fake(10_000), texts, max_tokens=3)
    both = together(fake(10_000), texts, max_tokens=3)
    assert both["tokens"] == alone["tokens"]
    assert all(len(t) <= 3 for t in both["tokens"])
