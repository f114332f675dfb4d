"""Questions asked in the asker's own words, answered by `edgerag serve` with
each pulled chat model: the README tour's documents, the moorcheh-edge
documentation's football example, and a question the documents do not answer."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from flask_app.inference.presets import PRESETS
from flask_app.rag.prompts import NO_CONTEXT_ANSWER
from flask_app.settings import Settings
from tests.http_client import ServerFailed, start_server

pytestmark = pytest.mark.real_model

TOUR = [
    {
        "id": "hours",
        "text": "The Calder City Museum is open Tuesday to Sunday from 10:00 to 18:00 and "
        "closed on Mondays.",
    },
    {"id": "wifi", "text": "The office guest Wi-Fi network is called Calder-Guest."},
]


@pytest.fixture(scope="module", params=list(PRESETS))
def server(
    request: pytest.FixtureRequest,
    real_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    llm: str = request.param
    served = Settings.load({"llm": llm}, {"EDGERAG_MODEL_DIR": str(real_settings.model_dir)})
    if not served.llm_path().is_file():
        pytest.fail(f"{served.llm_path()} is missing; run `edgerag pull --llm {llm}`")
    where = tmp_path_factory.mktemp(llm)
    args = ["--llm", llm, "--data-dir", str(where / "data")]
    args += ["--model-dir", str(real_settings.model_dir)]
    try:
        running = start_server(args, where / "server.log", timeout=180)
    except ServerFailed as exc:
        pytest.fail(str(exc))
    assert requests.get(running.base + "/health", timeout=5).json()["llm"]["preset"] == llm
    yield running.base
    running.stop()


# an x86-64 CPU without AVX-512 (llama.cpp is compiled for the machine it runs on)
_CPUINFO = Path("/proc/cpuinfo")
AVX2_ONLY = platform.machine() == "x86_64" and (
    not _CPUINFO.is_file() or "avx512f" not in _CPUINFO.read_text()
)


def preset_of(base: str) -> str:
    preset: str = requests.get(base + "/health", timeout=5).json()["llm"]["preset"]
    return preset


# Wrong answers a verifier passes, recorded as expected failures: (preset,
# question, only on an x86-64 CPU without AVX-512) -> (the reason, strict).
# A strict one turns red the day its preset declines; one at the edge of a
# gate is not strict. llama.cpp's AVX2 kernels give other hidden states and
# samples than its AVX-512 ones.
KNOWN_WRONG = {
    ("qwen2.5-coder-0.5b", "What is the door code for the office?", True): (
        "on a CPU without AVX-512 the 0.5B's verifier passed 'The door code for the office "
        "guest Wi-Fi network is Calder-Guest.' (docs/limits.md), recorded with an earlier "
        "verifier; AVX2's kernels were not run with this one, so either outcome there",
        False,
    ),
}


def expect_known_wrong(request: pytest.FixtureRequest, base: str, question: str) -> None:
    """Mark this case an expected failure where KNOWN_WRONG records it."""
    preset = preset_of(base)
    for avx2_only in {False, AVX2_ONLY}:
        known = KNOWN_WRONG.get((preset, question, avx2_only))
        if known is not None:
            reason, strict = known
            # recorded on AVX-512 kernels; other kernels round otherwise
            strict = strict and not AVX2_ONLY
            request.applymarker(pytest.mark.xfail(strict=strict, reason=reason))


def answer(base: str, body: dict[str, Any]) -> dict[str, Any]:
    r = requests.post(base + "/answer", json=body, timeout=120)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


@pytest.fixture
def tour(server: str) -> str:
    assert requests.delete(server + "/store", timeout=10).ok
    r = requests.post(server + "/upload", json={"store_mode": "text", "items": TOUR}, timeout=60)
    assert r.status_code == 200, r.text
    return server


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("What is the guest Wi-Fi network called?", "Calder-Guest"),
        ("What's the name of the visitor wireless network?", "Calder-Guest"),
        ("On which day is the museum closed?", "Monday"),
    ],
)
def test_the_tours_questions_are_answered(tour: str, question: str, said: str) -> None:
    body = answer(tour, {"query": question})
    assert said in str(body["answer"]), body


# (question, the documents' verdict as the answer begins, the other verdict)
YES_OR_NO = [
    ("Can I visit the museum on a Monday?", "no", "yes"),
    ("Is the guest Wi-Fi network called Calder-Guest?", "yes", "no"),
]


@pytest.mark.parametrize(("question", "verdict", "wrong"), YES_OR_NO)
def test_a_yes_or_no_question_gets_the_documents_verdict_or_a_decline(
    tour: str, question: str, verdict: str, wrong: str
) -> None:
    """Neither model reliably reads "closed on Mondays" into a no (both once
    said yes): the verifier declines what it is unsure of, and an answer
    given is the documents' verdict, never the other one."""
    body = answer(tour, {"query": question})
    text = str(body["answer"]).lower()
    if body["answer"] == NO_CONTEXT_ANSWER:
        return
    assert not text.startswith(wrong), body
    assert text.startswith(verdict) or "calder-guest" in text or "closed on mondays" in text, body


@pytest.mark.parametrize(
    "question",
    [
        "What is the Wi-Fi password?",
        "How much does a ticket to the museum cost?",  # a price
        "What's the museum's phone number?",  # a phone number
        "What is the door code for the office?",  # a code
    ],
)
def test_a_question_the_documents_do_not_answer_gets_the_fixed_sentence(
    request: pytest.FixtureRequest, tour: str, question: str
) -> None:
    """The verifier (or the model itself) declines what the tour's documents do not hold."""
    expect_known_wrong(request, tour, question)
    body = answer(tour, {"query": question})
    assert body["answer"] == NO_CONTEXT_ANSWER, body
    assert body["context_count"] == len(body["sources"]) >= 1  # the model was asked


# the moorcheh spec's own example: a header replacing the system prompt and
# its refusal rule, a footer before the question
CLIENT_PROMPTS = {
    "header_prompt": "You are a helpful assistant.",
    "footer_prompt": "Answer briefly.",
}


@pytest.mark.parametrize(
    "question",
    [
        "How much does a ticket to the museum cost?",
        # read on the client's prompt, the 0.5B's probe passed these two (P 0.44
        # and 0.56): "…Calder-Guest, which is open from 10:00 to 18:00…"
        "How fast is the guest Wi-Fi?",
        "Does the museum have a cafe?",
    ],
)
def test_a_clients_own_system_prompt_still_declines_what_the_documents_do_not_hold(
    request: pytest.FixtureRequest, tour: str, question: str
) -> None:
    """The verifier reads the answer written under the client's own prompt."""
    expect_known_wrong(request, tour, question)
    body = answer(tour, {"query": question, **CLIENT_PROMPTS})
    assert body["answer"] == NO_CONTEXT_ANSWER, body


def test_a_clients_own_system_prompt_still_gets_the_tours_answer(tour: str) -> None:
    body = answer(tour, {"query": "What is the guest Wi-Fi network called?", **CLIENT_PROMPTS})
    assert "Calder-Guest" in str(body["answer"]), body


def test_a_question_asked_again_is_declined_again(tour: str) -> None:
    """A declined answer stops early, leaving its prompt in the KV cache;
    the same question again is read the same way (llama-cpp-python once
    sampled an exactly cached prompt without a decode: the second ask got
    "The ticket to the museum costs $10.")."""
    question = {"query": "How much does a ticket to the museum cost?"}
    first, again = answer(tour, question), answer(tour, question)
    for body in (first, again):
        assert body["answer"] == NO_CONTEXT_ANSWER, body
    # the same reading, up to llama.cpp's arithmetic over a prompt partly cached
    assert first["answerable_probability"] == pytest.approx(
        again["answerable_probability"], abs=0.05
    ), (first, again)


KIOSK_AND_MUSEUM = [
    {"id": "kiosk", "text": "The kiosk's phone number is 555-0142 and its manager is Dana Ortiz."},
    TOUR[0],
]


def kiosk_and_museum(server: str) -> None:
    assert requests.delete(server + "/store", timeout=10).ok
    items = {"store_mode": "text", "items": KIOSK_AND_MUSEUM}
    assert requests.post(server + "/upload", json=items, timeout=60).status_code == 200


def test_a_fact_of_one_of_two_documents_is_answered(server: str) -> None:
    kiosk_and_museum(server)
    assert "Dana Ortiz" in str(answer(server, {"query": "Who runs the kiosk?"})["answer"])


def test_another_documents_facts_are_not_given_as_the_answer(
    request: pytest.FixtureRequest, server: str
) -> None:
    """The kiosk's opening hours are not stored; the museum's are, and share
    words with the question. Both verifiers decline the museum's hours (the
    1.5B's passed them while it read only the prompt: P 0.61 against its
    threshold 0.51)."""
    question = "What are the kiosk's opening hours?"
    expect_known_wrong(request, server, question)
    kiosk_and_museum(server)
    body = answer(server, {"query": question})
    assert body["answer"] == NO_CONTEXT_ANSWER, body


EARBUDS = [
    {
        "id": "p3",
        "text": "Pulse P3 earbuds. Up to 7 hours of listening per charge. Rated IPX4: safe "
        "with sweat and rain, but not for swimming.",
    },
    {
        "id": "p5",
        "text": "Pulse P5 earbuds. Up to 9 hours of listening per charge. Rated IPX7: they "
        "survive being submerged for 30 minutes at a depth of 1 metre.",
    },
]


@pytest.mark.parametrize(
    "question",
    ["Can I go swimming with the P5?", "How long do the P5 earbuds play on one charge?"],
)
def test_a_question_about_one_product_is_not_answered_from_its_siblings_sheet(
    server: str, question: str
) -> None:
    """The P3's sheet reads as close to a question about the P5 as the P5's
    own: it is neither shown to the model nor quoted (docs/answer-quality.md,
    "Another product's passage is not evidence")."""
    assert requests.delete(server + "/store", timeout=10).ok
    items = {"store_mode": "text", "items": EARBUDS}
    assert requests.post(server + "/upload", json=items, timeout=60).status_code == 200
    body = answer(server, {"query": question})
    assert [source["id"] for source in body["sources"]] == ["p5"], body
    said = str(body["answer"]).lower()
    assert not any(fact in said for fact in ("7 hours", "ipx4", "not for swimming")), body


def test_the_moorcheh_documentations_football_example(server: str, tmp_path: Path) -> None:
    assert requests.delete(server + "/store", timeout=10).ok
    vector = np.random.default_rng(7).standard_normal(384)
    vector = (vector / np.linalg.norm(vector)).tolist()
    item = {
        "id": "match",
        "vector": vector,
        "text": "Manchester United beat Chelsea 2-1 on Saturday.",
    }
    r = requests.post(
        server + "/upload", json={"store_mode": "vector", "items": [item]}, timeout=30
    )
    assert r.status_code == 200, r.text
    body = answer(server, {"query": "Who won the football match?", "query_vector": vector})
    assert "Manchester United" in str(body["answer"]), body
    assert body["context_count"] == 1
