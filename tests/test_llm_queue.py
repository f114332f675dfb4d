"""The LLM layer's queue, deadlines, cancellation and batched branches, with
the scripted fake decoded by the real engine."""

from __future__ import annotations

import threading
import time

import pytest

from flask_app.inference.engine import BatchEngine, Finish
from flask_app.inference.errors import LLMCancelled, LLMFailed, LLMOverloaded, LLMTimeout
from flask_app.inference.fakes import ScriptedBackend
from flask_app.inference.llm import LLM, Ask
from flask_app.inference.sampler import Sampling


def engine_of(llm: LLM) -> BatchEngine:
    """The local engine behind `llm` (its counters)."""
    assert isinstance(llm.engine, BatchEngine)
    return llm.engine


MESSAGES = [{"role": "user", "content": "hi"}]
GREEDY = Sampling(temperature=0.0)


def wait_until(condition: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.005)


def test_chat_returns_scripted_reply_through_template() -> None:
    backend = ScriptedBackend("Paris is the capital.")
    llm = LLM(backend)
    assert llm.chat(MESSAGES) == "Paris is the capital."  # type: ignore[arg-type]
    assert backend.prompts == ["<|user|>\nhi\n<|assistant|>\n"]


def test_stream_yields_a_delta_per_token_that_join_to_the_reply() -> None:
    llm = LLM(ScriptedBackend("one two three"))
    with llm.stream(MESSAGES) as tokens:  # type: ignore[arg-type]
        assert list(tokens) == ["one", " two", " three"]
    wait_until(lambda: llm.engine.busy_seqs == 0)
    assert not llm.slots.busy


def test_max_tokens_bounds_the_reply() -> None:
    llm = LLM(ScriptedBackend("a b c d e"))
    assert llm.chat(MESSAGES, max_tokens=2) == "a b"  # type: ignore[arg-type]


def test_a_stop_string_ends_the_reply_before_it() -> None:
    llm = LLM(ScriptedBackend("one two END three"))
    sampling = Sampling(stop=(" END",))
    assert llm.chat(MESSAGES, sampling=sampling) == "one two"  # type: ignore[arg-type]


def test_waiters_are_served_in_arrival_order() -> None:
    llm = LLM(ScriptedBackend("x y", token_delay=0.02, n_seq=1), max_waiters=5)
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
        wait_until(lambda i=i: llm.slots.waiting >= i + 1)
    assert llm.slots.waiting == 4
    holder.close()
    for t in threads:
        t.join(5)
    assert order == [0, 1, 2, 3]


def test_full_queue_raises_overloaded_with_retry_after() -> None:
    llm = LLM(ScriptedBackend("x", n_seq=1), max_waiters=0)
    with llm.stream(MESSAGES):  # type: ignore[arg-type]
        with pytest.raises(LLMOverloaded) as info:
            llm.stream(MESSAGES)  # type: ignore[arg-type]
        assert info.value.retry_after >= 1
    llm.chat(MESSAGES)  # type: ignore[arg-type]  # free again


def test_deadline_while_waiting_raises_timeout_and_leaves_queue() -> None:
    llm = LLM(ScriptedBackend("x", n_seq=1), max_waiters=3)
    with llm.stream(MESSAGES):  # type: ignore[arg-type]
        start = time.monotonic()
        with pytest.raises(LLMTimeout):
            llm.stream(MESSAGES, timeout=0.1)  # type: ignore[arg-type]
        assert time.monotonic() - start < 1.0
        assert llm.slots.waiting == 0


def test_a_client_that_leaves_while_waiting_gives_its_place_up() -> None:
    llm = LLM(ScriptedBackend("x", n_seq=1), max_waiters=3)
    with llm.stream(MESSAGES):  # type: ignore[arg-type]
        with pytest.raises(LLMCancelled):
            llm.stream(MESSAGES, abandoned=lambda: True)  # type: ignore[arg-type]
        assert llm.slots.waiting == 0


def test_deadline_during_generation_stops_it() -> None:
    backend = ScriptedBackend("a b c d e f g h", token_delay=0.05)
    llm = LLM(backend)
    with pytest.raises(LLMTimeout):
        llm.chat(MESSAGES, timeout=0.12)  # type: ignore[arg-type]
    wait_until(lambda: llm.engine.busy_seqs == 0)
    assert llm.engine.busy_seqs == 0


def test_closing_a_stream_early_stops_generation_and_frees_the_model() -> None:
    backend = ScriptedBackend("a b c d e f", token_delay=0.01)
    llm = LLM(backend)
    tokens = llm.stream(MESSAGES)  # type: ignore[arg-type]
    assert next(tokens) == "a"
    tokens.close()
    assert llm.engine.busy_seqs == 0  # freed at once, for the next request
    time.sleep(0.1)
    assert engine_of(llm).steps <= 3  # the step under way when it closed, and no more


def test_cancel_from_another_thread() -> None:
    llm = LLM(ScriptedBackend("a b c d e f", token_delay=0.01))
    tokens = llm.stream(MESSAGES)  # type: ignore[arg-type]
    next(tokens)
    threading.Thread(target=tokens.cancel).start()
    time.sleep(0.05)
    rest = list(tokens)
    assert len(rest) < 5
    wait_until(lambda: llm.engine.busy_seqs == 0)
    assert not llm.slots.busy


def test_backend_failure_becomes_llm_failed_and_frees_the_model() -> None:
    llm = LLM(ScriptedBackend("a b c", fail_after=1))
    with pytest.raises(LLMFailed, match="LLM request failed"):
        llm.chat(MESSAGES)  # type: ignore[arg-type]
    wait_until(lambda: llm.engine.busy_seqs == 0)
    assert llm.engine.busy_seqs == 0
    assert llm.chat(MESSAGES, max_tokens=1) == "a"  # type: ignore[arg-type]


# --- several answers decoded together ---------------------------------------------


def test_concurrent_requests_decode_together_and_each_gets_its_own_answer() -> None:
    backend = ScriptedBackend(lambda prompt: f"answer to {prompt.split()[1]}", token_delay=0.01)
    llm = LLM(backend, max_waiters=8)
    answers: dict[int, str] = {}

    def ask(i: int) -> None:
        answers[i] = llm.chat([{"role": "user", "content": f"q{i}"}])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert answers == {i: f"answer to q{i}" for i in range(4)}
    # four answers of three tokens each, decoded in far fewer steps than 4 x 3
    assert engine_of(llm).steps < 4 * 4


def test_a_client_leaving_mid_stream_leaves_the_others_going() -> None:
    backend = ScriptedBackend("a b c d e f g h", token_delay=0.05)
    llm = LLM(backend)
    gone = threading.Event()
    leaving = llm.stream(MESSAGES, abandoned=gone.is_set)  # type: ignore[arg-type]
    staying = llm.stream([{"role": "user", "content": "other"}])
    assert next(leaving) == "a"
    gone.set()
    assert "".join(staying) == "a b c d e f g h"
    assert len(list(leaving)) < 7
    assert leaving.cancelled_because_client_left


def test_branches_share_one_read_of_the_prompt() -> None:
    backend = ScriptedBackend(
        "x", candidates=lambda p: [("Paris it is.", 0.5), ("Lyon it is.", 0.5)]
    )
    llm = LLM(backend)
    messages = [{"role": "user", "content": "a question of several words"}]
    prompt_tokens = len(backend.tokens(backend.render(messages)))  # type: ignore[arg-type]
    generation = llm.generate(
        messages,  # type: ignore[arg-type]
        Ask(max_tokens=8, sampling=GREEDY),
        samples=5,
        sample_sampling=Sampling(temperature=1.0, seed=3),
    )
    candidates = generation.settle()
    generation.close()
    assert engine_of(llm).prompt_tokens_read == prompt_tokens  # read once for six branches
    assert len(candidates) == 6
    assert {c.text for c in candidates} == {"Paris it is.", "Lyon it is."}
    assert all(c.finish is Finish.STOP for c in candidates)


def test_a_later_branch_draws_from_the_same_first_step() -> None:
    backend = ScriptedBackend(
        "x", candidates=lambda p: [("Paris it is.", 0.5), ("Lyon it is.", 0.5)]
    )
    llm = LLM(backend)
    generation = llm.generate(
        MESSAGES,  # type: ignore[arg-type]
        Ask(max_tokens=8, sampling=GREEDY, spare=4),
    )
    (greedy,) = generation.settle()
    read = engine_of(llm).prompt_tokens_read
    generation.spawn(4, Sampling(temperature=1.0, seed=5), 8, None)
    later = generation.settle()
    generation.close()
    assert len(later) == 5 and later[0].text == greedy.text
    assert {c.text for c in later[1:]} <= {"Paris it is.", "Lyon it is."}
    assert engine_of(llm).prompt_tokens_read == read  # the prompt was not read again


def test_branches_spawned_but_not_forked_when_one_is_chosen_are_never_written() -> None:
    backend = ScriptedBackend("one two three four five six", token_delay=0.01)
    llm = LLM(backend)
    generation = llm.generate(
        MESSAGES,  # type: ignore[arg-type]
        Ask(max_tokens=20, sampling=GREEDY, pause_at=2, spare=3),
    )
    generation.settle()
    job = generation.job
    with job.cond:  # the engine cannot fork them before the choice
        generation.spawn(3, Sampling(temperature=1.0, seed=5), 20, 2)
        job.keep_only(0)
    assert "".join(generation.stream(0)) == "one two three four five six"
    assert len(job.branches) == 1  # not forked after the choice, nor decoded
    generation.close()


def test_a_paused_branch_goes_on_once_chosen() -> None:
    backend = ScriptedBackend("one two three four five six")
    llm = LLM(backend)
    generation = llm.generate(MESSAGES, Ask(max_tokens=20, sampling=GREEDY, pause_at=2))  # type: ignore[arg-type]
    (paused,) = generation.settle()
    assert paused.finish is Finish.PAUSED and paused.text == "one two"
    assert "".join(generation.stream(0)) == "one two three four five six"
    generation.close()


def test_a_second_prompt_reads_only_what_it_does_not_share_with_the_first() -> None:
    backend = ScriptedBackend("ok")
    llm = LLM(backend)
    system = {"role": "system", "content": "a long stable system prompt " * 10}
    llm.chat([system, {"role": "user", "content": "first"}])  # type: ignore[list-item]
    read = engine_of(llm).prompt_tokens_read
    llm.chat([system, {"role": "user", "content": "second"}])  # type: ignore[list-item]
    assert engine_of(llm).prompt_tokens_read - read < 10


def test_an_idle_request_reads_all_but_its_system_turn_whatever_came_before() -> None:
    """A request that finds the model idle starts as on a fresh start: the
    cache is emptied but for the system turn, which the first request after
    an emptying read in a step of its own (the real model's numbers then do
    not depend on what was asked before: tests/test_real_llm.py)."""
    backend = ScriptedBackend("ok")
    llm = LLM(backend)
    engine = engine_of(llm)
    steps: list[int] = []
    decode = engine.decoder.decode

    def recording(entries, layers):  # type: ignore[no-untyped-def]
        steps.append(len(entries))
        return decode(entries, layers)

    engine.decoder.decode = recording  # type: ignore[method-assign]
    system = {"role": "system", "content": "a long stable system prompt " * 10}
    question = [system, {"role": "user", "content": "the same question"}]
    llm.chat(question)  # type: ignore[arg-type]
    request = backend.requests[-1]
    system_turn = "".join(backend.vocab[t] for t in request.prompt[: request.stable])
    assert system_turn.startswith("<|system|>") and "question" not in system_turn
    assert system_turn.split()[-1] == "prompt"  # all of the system message
    assert steps[0] == request.stable  # read alone
    llm.chat([system, {"role": "user", "content": "another question"}])  # type: ignore[list-item]
    read = engine.prompt_tokens_read
    llm.chat(question)  # type: ignore[arg-type]
    # the rest of the first read of this very prompt was not kept
    assert engine.prompt_tokens_read - read == len(request.prompt) - request.stable
    llm.chat([{"role": "user", "content": "no system turn"}])
    assert backend.requests[-1].stable == 0
    read = engine.prompt_tokens_read
    llm.chat(question)  # type: ignore[arg-type]
    assert engine.prompt_tokens_read - read == len(request.prompt)  # read afresh, as at first
    assert steps[-3] == request.stable  # the system turn alone again


def test_a_conversations_next_turn_reads_only_what_its_last_turn_did_not() -> None:
    backend = ScriptedBackend("the reply to it")
    llm = LLM(backend)
    engine = engine_of(llm)
    system = {"role": "system", "content": "a stable system prompt " * 10}
    first = [system, {"role": "user", "content": "a long first question " * 20}]
    reply = llm.chat(first)  # type: ignore[arg-type]
    read = engine.prompt_tokens_read
    follow_up = [*first, {"role": "assistant", "content": reply}]
    follow_up.append({"role": "user", "content": "and then?"})
    llm.chat(follow_up)  # type: ignore[arg-type]
    assert engine.prompt_tokens_read - read < 15  # not the first question's 80 again
    assert not backend.requests[-1].fresh and backend.requests[0].fresh


def test_greedy_answers_are_the_same_alone_and_beside_others() -> None:
    backend = ScriptedBackend(lambda prompt: f"reply {prompt.split()[1]} done", token_delay=0.005)
    llm = LLM(backend)
    alone = [llm.chat([{"role": "user", "content": f"q{i}"}], sampling=GREEDY) for i in range(3)]
    streams = [
        llm.stream([{"role": "user", "content": f"q{i}"}], sampling=GREEDY) for i in range(3)
    ]
    together = ["".join(s) for s in streams]
    assert together == alone


def test_sequences_a_chosen_answer_gave_back_are_not_freed_again_when_it_closes() -> None:
    """A question's losing candidates free their sequences when one is
    chosen; another request may take them. Closing the first must then free
    only what it still holds, or a third request is given the second's
    sequence while it answers (llama.cpp: "positions are not continuous")."""
    backend = ScriptedBackend("one two three four five six", token_delay=0.002)
    llm = LLM(backend, max_waiters=4)
    engine = engine_of(llm)
    first = llm.generate(
        MESSAGES,  # type: ignore[arg-type]
        Ask(max_tokens=20, sampling=GREEDY, pause_at=2),
        samples=3,
        sample_sampling=Sampling(temperature=1.0, seed=1),
    )
    assert len(first.settle()) == 4
    chosen = first.stream(0)  # the other three give their sequences back
    next(chosen)
    second = llm.generate(
        [{"role": "user", "content": "another"}],
        Ask(max_tokens=20, sampling=GREEDY, pause_at=1),
    )
    second.settle()
    held_by_second = set(second._job.seqs)
    first.close()
    with engine.cond:
        free = set(engine.sequences.free)
        assert not held_by_second & free, (held_by_second, free)
    assert "".join(second.stream(0)) == "one two three four five six"
    second.close()


def test_refusal_words_and_a_system_turn_are_tokenized_once_across_requests() -> None:
    backend = ScriptedBackend("fine.")
    calls = {"first_tokens": 0, "tokens": 0}
    first_tokens, tokens = backend.first_tokens, backend.tokens

    def counted_first_tokens(words):  # type: ignore[no-untyped-def]
        calls["first_tokens"] += 1
        return first_tokens(words)

    def counted_tokens(text):  # type: ignore[no-untyped-def]
        calls["tokens"] += 1
        return tokens(text)

    backend.first_tokens = counted_first_tokens  # type: ignore[method-assign]
    backend.tokens = counted_tokens  # type: ignore[method-assign]
    llm = LLM(backend)
    ask = Ask(max_tokens=4, sampling=GREEDY, refusal_starts=("I", "Sorry"))
    for n in range(3):
        messages = [
            {"role": "system", "content": "Answer from the passages."},
            {"role": "user", "content": f"question {n}"},
        ]
        generation = llm.generate(messages, ask)  # type: ignore[arg-type]
        generation.settle()
        generation.close()
    # each request tokenizes its own prompt; the system turn and the refusal
    # words only once
    assert calls == {"first_tokens": 1, "tokens": 3 + 1}
    other = llm.generate(MESSAGES, Ask(max_tokens=4, refusal_starts=("No",)))  # type: ignore[arg-type]
    other.settle()
    other.close()
    assert calls["first_tokens"] == 2


def test_the_llm_is_freed_by_its_last_reference_alone() -> None:
    """No reference cycle holds the LLM (its slots, its token caches): it
    goes when its owner lets go, not at some later garbage collection."""
    import gc
    import weakref

    llm = LLM(ScriptedBackend("Paris."))
    system = [{"role": "system", "content": "Be brief."}, *MESSAGES]
    ask = Ask(max_tokens=8, sampling=GREEDY, refusal_starts=("I don't",))
    generation = llm.generate(system, ask)  # type: ignore[arg-type]
    assert "".join(generation.stream()) == "Paris."
    generation.close()
    del generation
    assert llm.slots.capacity >= 1
    gone = weakref.ref(llm)
    slots = llm.slots  # held elsewhere (the embedder asks it when to lend cores)
    gc.disable()
    try:
        del llm
        assert gone() is None
    finally:
        gc.enable()
    assert slots.holders == 0 and slots.waiting == 0 and not slots.busy
    assert slots.max_waiters == 0
