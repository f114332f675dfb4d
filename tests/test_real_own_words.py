"""Questions asked in the asker's own words, answered by `edgerag serve` with
each pulled chat model: the README tour's documents, the moorcheh-edge
documentation's football example, and a question the documents do not answer."""

from __future__ import annotations

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


def test_can_i_visit_on_a_monday_is_answered_no(tour: str) -> None:
    """Either the model says no, or (declined: neither model reads a schedule
    into a yes or no) the closing-day line is quoted instead of the refusal."""
    body = answer(tour, {"query": "Can I visit the museum on a Monday?"})
    text = str(body["answer"]).lower()
    assert body["answer"] != NO_CONTEXT_ANSWER, body
    assert "closed on mondays" in text or (text.startswith("no") and "closed" in text), body


@pytest.mark.parametrize(
    "question",
    ["Can I visit the museum on a Monday?", "Is the guest Wi-Fi network called Calder-Guest?"],
)
def test_a_yes_or_no_question_never_gets_the_models_own_verdict(tour: str, question: str) -> None:
    """Both presets' probes quote a yes-or-no question they let through
    (the models read "closed on Mondays" into a yes): the answer is a
    document's line, quoted, or a decline, never the model's yes or no."""
    body = answer(tour, {"query": question})
    assert body["answerable_probability"] is not None, body  # the probe decided
    text = str(body["answer"])
    assert text.startswith(("The documents say: ", "The documents do not answer this directly"))
    assert '"' in text and "Calder" in text, body  # a line of the tour's documents


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
    tour: str, question: str
) -> None:
    """The answerability probe declines what the tour's documents do not hold."""
    body = answer(tour, {"query": question})
    assert body["answer"] == NO_CONTEXT_ANSWER, body
    assert body["context_count"] == len(body["sources"]) >= 1  # the model was asked
    assert body["answerable_probability"] is not None, body


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
    tour: str, question: str
) -> None:
    """The probe reads the prompt it was fitted on, not the client's (read
    on the client's, the 0.5B's passed 80% of the unanswerable test questions)."""
    body = answer(tour, {"query": question, **CLIENT_PROMPTS})
    assert body["answer"] == NO_CONTEXT_ANSWER, body
    assert body["answerable_probability"] is not None, body


def test_a_clients_own_system_prompt_still_gets_the_tours_answer(tour: str) -> None:
    body = answer(tour, {"query": "What is the guest Wi-Fi network called?", **CLIENT_PROMPTS})
    assert "Calder-Guest" in str(body["answer"]), body


def test_a_question_asked_again_is_declined_again(tour: str) -> None:
    """A declined answer stops at its first token, leaving its whole prompt
    in the KV cache; the same question again must still be read by the
    probe (llama-cpp-python samples an exactly cached prompt without a
    decode: the second ask once got "The ticket to the museum costs $10.")."""
    question = {"query": "How much does a ticket to the museum cost?"}
    first, again = answer(tour, question), answer(tour, question)
    for body in (first, again):
        assert body["answer"] == NO_CONTEXT_ANSWER, body
        assert body["answerable_probability"] is not None, body


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


@pytest.mark.xfail(
    strict=True,
    reason="both presets answer with the museum's hours and their probes pass it "
    "(docs/limits.md: another document's fact given as the answer)",
)
def test_another_documents_facts_are_not_given_as_the_answer(server: str) -> None:
    """The kiosk's opening hours are not stored; the museum's are, and share
    words with the question. Both probes pass it (the 1.5B's 0.61 against its
    threshold 0.51, where "Who runs the kiosk?" gets 0.69): it stays here as
    an expected failure, which turns red the day a preset declines it."""
    kiosk_and_museum(server)
    body = answer(server, {"query": "What are the kiosk's opening hours?"})
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
