"""benches/quality/served_answer.py: a row's answer is weighed as the server
holds it when it reads the answer's state after n tokens (n + 1 of them)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from benches.quality import served_answer


class WordVocabulary:
    """A token per word, for the cut's arithmetic (no model file)."""

    def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
        self.words = text.split(b" ")
        return list(range(len(self.words)))

    def detokenize(self, ids: Sequence[int]) -> bytes:
        return b" ".join(self.words[i] for i in ids)


@pytest.fixture
def words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served_answer, "_vocabulary", lambda llm: WordVocabulary())


def test_the_state_after_n_tokens_is_read_with_n_plus_one_in_hand() -> None:
    assert served_answer.served_tokens("at16") == 17
    assert served_answer.served_tokens("at8") == 9
    assert served_answer.served_tokens("last") is None
    assert served_answer.served_tokens("mean") is None


def test_a_long_candidate_is_cut_to_the_served_tokens(words: None) -> None:
    text = " ".join(f"long{i}" for i in range(20))
    candidate = {"text": text, "tokens": 20, "logprobs": [-1.0] * 17 + [-9.0] * 3}
    cut_text, logprobs = served_answer.cut("qwen2.5-coder-0.5b", candidate, 17)
    assert cut_text == " ".join(f"long{i}" for i in range(17))
    assert logprobs == [-1.0] * 17


def test_a_short_candidate_or_a_full_read_is_left_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_model(llm: str) -> None:
        raise AssertionError("no tokenizer needed")

    monkeypatch.setattr(served_answer, "_vocabulary", no_model)
    short = {"text": " short answer ", "tokens": 3, "logprobs": [-0.5, -0.2, -0.1]}
    assert served_answer.cut("qwen2.5-coder-0.5b", short, 17) == (
        "short answer",
        [-0.5, -0.2, -0.1],
    )
    whole = {"text": "w " * 30, "tokens": 30, "logprobs": [-0.3] * 30}
    assert served_answer.cut("qwen2.5-coder-0.5b", whole, None)[1] == [-0.3] * 30
