"""The RAG pipeline's parts with the scripted fake LLM: prompt assembly,
passage budget, sentence-boundary cuts, history trimming."""

from __future__ import annotations

import pytest

from flask_app import rag
from flask_app.inference.fakes import ScriptedBackend
from flask_app.inference.llm import LLM, ChatMessage
from flask_app.rag import prompts
from flask_app.store import Hit


def source(text: str, score: float = 0.9, id_: str = "d") -> Hit:
    return Hit(id_, score, text, None)


def words(n: int, word: str = "w") -> str:
    return " ".join([word] * n)


def test_default_prompt_layout() -> None:
    q = rag.Question(
        query="When did it open?",
        footer_prompt="Answer briefly.",
        chat_history=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
        ],
    )
    messages = rag.build_messages(q, ["First passage.", "Second passage."])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == prompts.DEFAULT_SYSTEM_PROMPT
    assert messages[1]["content"] == "Hi" and messages[2]["content"] == "Hello!"
    assert messages[3]["content"] == (
        "Document 1:\nFirst passage.\n\nDocument 2:\nSecond passage.\n\n"
        "Answer briefly.\n\nQuestion: When did it open?"
    )


def test_header_prompt_replaces_the_system_prompt() -> None:
    messages = rag.build_messages(rag.Question(query="q", header_prompt="You are a pirate."), ["p"])
    assert messages[0] == {"role": "system", "content": "You are a pirate."}
    assert "Document 1:\np" in messages[-1]["content"]


def test_system_prompt_is_a_stable_prefix() -> None:
    a = rag.build_messages(rag.Question(query="one"), ["alpha"])
    b = rag.build_messages(rag.Question(query="two"), ["beta", "gamma"])
    assert a[0] == b[0]


def test_fit_passages_keeps_order_and_cuts_on_a_sentence() -> None:
    count = len  # one "token" per character keeps the arithmetic visible
    texts = ["a" * 30, "First sentence. Second sentence. Third one.", "never reached"]
    fitted = rag.fit_passages(texts, 30 + 2 * len("Document 1:\n\n\n") + 33, count)
    assert fitted[0] == "a" * 30
    assert fitted[1] == "First sentence. Second sentence."
    assert len(fitted) == 2


def test_cut_falls_back_to_words_for_one_long_sentence() -> None:
    text = "one two three four five six seven eight nine ten"
    assert rag.cut_to_tokens(text, 3, lambda t: len(t.split())) == "one two three"
    assert rag.cut_to_tokens(text, 0, lambda t: len(t.split())) == ""


def test_budget_caps_passages_and_never_overflows_the_window() -> None:
    llm = LLM(ScriptedBackend(n_ctx=300))
    sources = [source(words(80, f"p{i}") + ".", id_=f"d{i}") for i in range(5)]
    q = rag.Question(query="what?")
    prompt = rag.build_prompt(llm, q, sources, answer_tokens=100, context_tokens=1000)
    assert prompt.prompt_tokens + 100 <= 300
    assert 1 <= len(prompt.sources) < 5
    assert prompt.sources == sources[: len(prompt.sources)]
    capped = rag.build_prompt(llm, q, sources, answer_tokens=10, context_tokens=90)
    # 80 words + 2 label words fit; the second passage is cut to what is left (6 words)
    assert [s.id for s in capped.sources] == ["d0", "d1"]
    assert "Document 2:\np1 p1 p1 p1 p1 p1\n" in capped.messages[-1]["content"]


def test_long_history_drops_the_oldest_turns_first() -> None:
    llm = LLM(ScriptedBackend(n_ctx=400))
    history = []
    for i in range(6):
        history += [
            {"role": "user", "content": words(30, f"u{i}")},
            {"role": "assistant", "content": words(30, f"a{i}")},
        ]
    q = rag.Question(query="latest question", chat_history=history)  # type: ignore[arg-type]
    prompt = rag.build_prompt(llm, q, [source("A passage.")], answer_tokens=50, context_tokens=100)
    text = " ".join(m["content"] for m in prompt.messages)
    assert "u5" in text and "u0" not in text
    assert prompt.prompt_tokens + 50 <= 400


def test_question_too_large_for_the_window_is_a_clear_error() -> None:
    llm = LLM(ScriptedBackend(n_ctx=256))
    with pytest.raises(rag.ContextOverflow, match="256-token context window"):
        rag.build_prompt(
            llm, rag.Question(query=words(400)), [source("p")], answer_tokens=64, context_tokens=100
        )


def test_clean_stream_strips_only_leading_whitespace() -> None:
    assert list(rag.clean_stream(iter(["  ", " The", " end", " "]))) == ["The", " end", " "]


def test_history_trimming_costs_the_window_not_the_history() -> None:
    """2 MB of chat history used to be re-tokenized once per dropped exchange
    (34 s of CPU before queueing); now only the turns that can fit are counted."""
    counted: list[int] = []

    class Counting(ScriptedBackend):
        def count_tokens(self, text: str) -> int:
            counted.append(len(text))
            return super().count_tokens(text)

    llm = LLM(Counting("ok", n_ctx=2048))
    turn = "word " * 4000  # 20,000 characters
    history: list[ChatMessage] = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": turn} for i in range(100)
    ]
    q = rag.Question(query="And then?", chat_history=history)
    prompt = rag.build_prompt(llm, q, [source("A passage.")], answer_tokens=64, context_tokens=256)
    assert sum(counted) < 200_000  # was about 100 × 2 MB
    assert prompt.prompt_tokens < 2048


def test_recent_history_keeps_whole_exchanges_newest_first() -> None:
    turns: list[ChatMessage] = [
        {"role": "user", "content": "a " * 10},
        {"role": "assistant", "content": "b " * 10},
        {"role": "user", "content": "c " * 10},
        {"role": "assistant", "content": "d " * 10},
    ]
    count = len  # one token per character
    assert rag.recent_history(turns, 1000, count) == turns
    assert rag.recent_history(turns, 50, count) == turns[2:]
    assert rag.recent_history(turns, 30, count) == []
