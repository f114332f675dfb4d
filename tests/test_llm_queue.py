"""The LLM layer's queue, deadlines and cancellation, with the scripted fake."""

from __future__ import annotations

import threading
import time

import pytest

from flask_app.inference.fakes import ScriptedBackend
from flask_app.inference.llm import LLM, LLMFailed, LLMOverloaded, LLMTimeout

MESSAGES = [{"role": "user", "content": "hi"}]


def test_chat_returns_scripted_reply_through_template() -> None:
    backend = ScriptedBackend("Paris is the capital.")
    llm = LLM(backend)
    assert llm.chat(MESSAGES) == "Paris is the capital."  # type: ignore[arg-type]
    assert backend.prompts == ["<|user|>\nhi\n<|assistant|>\n"]


def test_stream_yields_deltas_that_join_to_the_reply() -> None:
    llm = LLM(ScriptedBackend("one two three"))
    with llm.stream(MESSAGES) as tokens:  # type: ignore[arg-type]
        assert list(tokens) == ["one", " two", " three"]
    assert not llm.gate.busy


def test_max_tokens_bounds_the_reply() -> None:
    llm = LLM(ScriptedBackend("a b c d e"))
    assert llm.chat(MESSAGES, max_tokens=2) == "a b"  # type: ignore[arg-type]


def test_waiters_are_served_in_arrival_order() -> None:
    llm = LLM(ScriptedBackend("x y", token_delay=0.02), max_waiters=5)
    order: list[int] = []
    holder = llm.stream(MESSAGES)  # type: ignore[arg-type]
    threads = []
    for i in range(4):

        def run(i: int = i) -> None:
            llm.chat(MESSAGES)  # type: ignore[arg-type]
            order.append(i)

        t = threading.Thread(target=run)
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 2
        while llm.gate.waiting < i + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert llm.gate.waiting == 4
    holder.close()
    for t in threads:
        t.join(5)
    assert order == [0, 1, 2, 3]


def test_full_queue_raises_overloaded_with_retry_after() -> None:
    llm = LLM(ScriptedBackend("x"), max_waiters=0)
    with llm.stream(MESSAGES):  # type: ignore[arg-type]
        with pytest.raises(LLMOverloaded) as info:
            llm.stream(MESSAGES)  # type: ignore[arg-type]
        assert info.value.retry_after >= 1
    llm.chat(MESSAGES)  # type: ignore[arg-type]  # free again


def test_deadline_while_waiting_raises_timeout_and_leaves_queue() -> None:
    llm = LLM(ScriptedBackend("x"), max_waiters=3)
    with llm.stream(MESSAGES):  # type: ignore[arg-type]
        start = time.monotonic()
        with pytest.raises(LLMTimeout):
            llm.stream(MESSAGES, timeout=0.1)  # type: ignore[arg-type]
        assert time.monotonic() - start < 1.0
        assert llm.gate.waiting == 0


def test_deadline_during_generation_stops_it() -> None:
    backend = ScriptedBackend("a b c d e f g h", token_delay=0.05)
    llm = LLM(backend)
    with pytest.raises(LLMTimeout):
        llm.chat(MESSAGES, timeout=0.12)  # type: ignore[arg-type]
    assert not llm.gate.busy
    assert backend.closed_early == 1


def test_closing_a_stream_early_stops_generation_and_frees_the_model() -> None:
    backend = ScriptedBackend("a b c d e f")
    llm = LLM(backend)
    tokens = llm.stream(MESSAGES)  # type: ignore[arg-type]
    assert next(tokens) == "a"
    tokens.close()
    assert backend.closed_early == 1
    assert not llm.gate.busy


def test_cancel_from_another_thread() -> None:
    llm = LLM(ScriptedBackend("a b c d e f", token_delay=0.01))
    tokens = llm.stream(MESSAGES)  # type: ignore[arg-type]
    next(tokens)
    threading.Thread(target=tokens.cancel).start()
    time.sleep(0.05)
    rest = list(tokens)
    assert len(rest) < 5
    assert not llm.gate.busy


def test_backend_failure_becomes_llm_failed_and_frees_the_model() -> None:
    llm = LLM(ScriptedBackend("a b c", fail_after=1))
    with pytest.raises(LLMFailed, match="LLM request failed"):
        llm.chat(MESSAGES)  # type: ignore[arg-type]
    assert not llm.gate.busy


def test_with_two_replicas_two_generate_at_once_and_the_third_waits_its_turn() -> None:
    llm = LLM(ScriptedBackend("x y"), max_waiters=1, timeout=5, replicas=2)
    first = llm.stream(MESSAGES)  # type: ignore[arg-type]
    second = llm.stream(MESSAGES)  # type: ignore[arg-type]
    assert llm.gate.busy and llm.gate.holders == 2
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(llm.chat(MESSAGES)))  # type: ignore[arg-type]
    waiter.start()
    deadline = time.monotonic() + 5
    while llm.gate.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert llm.gate.waiting == 1
    with pytest.raises(LLMOverloaded) as full:  # every replica busy and the queue full: 503
        llm.stream(MESSAGES)  # type: ignore[arg-type]
    assert full.value.retry_after >= 1
    first.close()
    waiter.join(5)
    assert got == ["x y"]
    second.close()
    assert llm.gate.holders == 0 and not llm.gate.busy
