"""The default LLM through llama.cpp: chat template, streaming, queue, KV prefix
reuse, and several answers decoded together as they are one at a time."""

from __future__ import annotations

import threading
import time

import pytest

from flask_app.inference.engine import BatchEngine, Finish
from flask_app.inference.errors import LLMOverloaded
from flask_app.inference.llama_backend import LlamaBackend
from flask_app.inference.llm import LLM, Ask, ChatMessage, Sampling
from flask_app.settings import Settings


def engine_of(llm: LLM) -> BatchEngine:
    """The local engine behind `llm` (its counters)."""
    assert isinstance(llm.engine, BatchEngine)
    return llm.engine


pytestmark = pytest.mark.real_model

SYSTEM = "You are a concise assistant. " + " ".join(
    f"Rule {i}: answer only from the provided facts and keep answers short." for i in range(30)
)


@pytest.fixture(scope="module")
def llm(real_settings: Settings) -> LLM:
    # one sequence: the queue tests need the model held by one request
    backend = LlamaBackend(real_settings.llm_path(), n_ctx=2048, n_seq=1)
    return LLM(backend, max_waiters=1, timeout=60)


@pytest.fixture(scope="module")
def batched(real_settings: Settings) -> LLM:
    return LLM(LlamaBackend(real_settings.llm_path(), n_ctx=4096, n_seq=6), timeout=120)


def ask(question: str, system: str = SYSTEM) -> list[ChatMessage]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def test_model_id_is_derived_from_the_gguf(llm: LLM) -> None:
    assert llm.model_id == "qwen2.5-coder-0.5b-instruct-awq:q4_0"


def test_prompt_uses_the_gguf_chat_template(llm: LLM) -> None:
    prompt = llm.backend.render(ask("hi", system="S"))
    assert prompt == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_streams_a_short_grounded_answer(llm: LLM) -> None:
    messages = ask(
        "Fact: the Harlow Bridge opened in 1998. In which year did the Harlow Bridge open?"
    )
    with llm.stream(messages, max_tokens=16, sampling=Sampling(temperature=0.0)) as tokens:
        pieces = list(tokens)
    assert len(pieces) >= 2
    assert "1998" in "".join(pieces)
    assert not llm.slots.busy


def test_a_seed_repeats_a_sampled_answer(llm: LLM) -> None:
    messages = ask("Write one sentence about a lighthouse.", system="Be creative.")

    def draw(seed: int) -> str:
        sampling = Sampling(temperature=1.2, top_p=1.0, top_k=None, seed=seed)
        with llm.stream(messages, max_tokens=24, sampling=sampling) as tokens:
            return "".join(tokens)

    # every draw after the first reuses the same cached prompt, so the logits
    # are computed the same way each time (a full prompt evaluation differs
    # from a cached one in the last bits, which a hot sampler can feel)
    draw(0)
    first = draw(1234)
    others = {draw(1), draw(2), draw(3)}
    assert draw(1234) == first
    assert len(others | {first}) >= 2  # other seeds sample otherwise


def test_token_counting(llm: LLM) -> None:
    assert llm.count_tokens("hello world") == 2
    assert llm.count_chat_tokens(ask("hi", system="S")) > 5


def _time_to_first_token(llm: LLM, messages: list[ChatMessage]) -> float:
    start = time.perf_counter()
    with llm.stream(messages, max_tokens=2, sampling=Sampling(temperature=0.0)) as tokens:
        next(tokens)
        return time.perf_counter() - start


def test_stable_system_prompt_is_reused_from_the_kv_cache(llm: LLM) -> None:
    _time_to_first_token(llm, ask("Warm up."))
    cold = _time_to_first_token(llm, ask("What is rule 3?", system="Changed. " + SYSTEM))
    warm = _time_to_first_token(llm, ask("What is rule 4?", system="Changed. " + SYSTEM))
    print(f"TTFT: new system prompt {cold * 1000:.0f} ms, same again {warm * 1000:.0f} ms")
    assert warm < 0.5 * cold


def test_queue_overflow_under_contention(llm: LLM) -> None:
    holder = llm.stream(
        ask("Count from one to fifty."), max_tokens=64, sampling=Sampling(temperature=0.0)
    )
    next(holder)
    waiter_done = threading.Event()

    def waiter() -> None:
        llm.chat(ask("Say yes."), max_tokens=2)
        waiter_done.set()

    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 5
    while llm.slots.waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(LLMOverloaded) as info:
        llm.stream(ask("One more?"), max_tokens=2)
    assert info.value.retry_after >= 1
    holder.close()
    t.join(30)
    assert waiter_done.is_set()


QUESTIONS = [
    "Fact: the Harlow Bridge opened in 1998. When did the Harlow Bridge open?",
    "Fact: the museum is closed on Mondays. On which day is the museum closed?",
    "Fact: the guest Wi-Fi is called Calder-Guest. What is the guest Wi-Fi called?",
]


def test_greedy_answers_decoded_together_are_those_written_alone(batched: LLM) -> None:
    greedy = Sampling(temperature=0.0)
    alone = [batched.chat(ask(q), max_tokens=24, sampling=greedy) for q in QUESTIONS]
    streams = [batched.stream(ask(q), max_tokens=24, sampling=greedy) for q in QUESTIONS]
    together = ["".join(s) for s in streams]
    assert together == alone
    assert "1998" in alone[0] and "Monday" in alone[1] and "Calder-Guest" in alone[2]


def _numbers(llm: LLM, question: str) -> tuple[str, tuple[float, ...], bytes, bytes, object]:
    """What a verified answer is made of: the greedy answer, its tokens'
    log-probabilities, the hidden states at the prompt's end and at the
    answer's last token, and the first step's refusal probability."""
    generation = llm.generate(
        ask(question),
        Ask(
            max_tokens=16,
            sampling=Sampling(temperature=0.0),
            layers=(14,),
            refusal_starts=("I", "Sorry"),
        ),
    )
    first, prompt_state = generation.reading()
    (answer,) = generation.settle()
    generation.close()
    return (
        answer.text,
        answer.logprobs,
        prompt_state[14].tobytes(),
        answer.last_state[14].tobytes(),
        first.refusal_probability,
    )


def test_a_question_gets_the_same_numbers_whatever_was_asked_before(batched: LLM) -> None:
    """Asked again after other questions, sampled answers and another system
    prompt, a question's answer, probabilities and hidden states are the
    same bit for bit (the probes read them: an answer near a threshold
    would otherwise be given or declined by what came before)."""
    before = _numbers(batched, QUESTIONS[1])
    batched.chat(ask(QUESTIONS[0]), max_tokens=24, sampling=Sampling(temperature=0.0))
    sampled = batched.generate(
        ask(QUESTIONS[2]),
        Ask(max_tokens=12, sampling=Sampling(temperature=0.0)),
        samples=3,
        sample_sampling=Sampling(temperature=0.8, seed=3),
    )
    sampled.settle()
    sampled.close()
    batched.chat(ask(QUESTIONS[2], system="Another system prompt."), max_tokens=8)
    assert _numbers(batched, QUESTIONS[1]) == before
    assert _numbers(batched, QUESTIONS[1]) == before  # from the cached system turn


def test_candidates_share_one_read_of_the_prompt_and_carry_their_states(batched: LLM) -> None:
    read = engine_of(batched).prompt_tokens_read
    generation = batched.generate(
        ask(QUESTIONS[0]),
        Ask(max_tokens=32, sampling=Sampling(temperature=0.0), layers=(12,)),
        samples=4,
        sample_sampling=Sampling(temperature=0.8, seed=7),
    )
    candidates = generation.settle()
    generation.close()
    assert len(candidates) == 5
    assert all(c.finish is Finish.STOP and "1998" in c.text for c in candidates)
    assert all(c.last_state[12].shape == (896,) for c in candidates)
    # the system prompt was cached before; at most the question's tokens were read
    assert engine_of(batched).prompt_tokens_read - read <= batched.count_chat_tokens(
        ask(QUESTIONS[0])
    )


def test_clients_choosing_among_candidates_at_once_each_get_their_answer(batched: LLM) -> None:
    """Each client writes three short candidates, keeps the first (the others'
    sequences go back and a waiting client takes them) and streams it to
    its end, six clients at once on six sequences, three rounds."""
    failures: list[BaseException] = []
    answers: dict[int, str] = {}

    def client(i: int) -> None:
        try:
            generation = batched.generate(
                ask(QUESTIONS[i % 3]),
                Ask(max_tokens=24, sampling=Sampling(temperature=0.0), pause_at=3),
                samples=2,
                sample_sampling=Sampling(temperature=0.8, seed=i),
            )
            generation.settle()
            answers[i] = "".join(generation.stream(0))  # the greedy one
            generation.close()
        except BaseException as exc:  # reported below
            failures.append(exc)

    for _ in range(3):
        threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failures, failures
        facts = ("1998", "monday", "calder")
        assert all(facts[i % 3] in text.lower() for i, text in answers.items()), answers
