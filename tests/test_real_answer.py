"""Grounded answers from the real default models (in-process app)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from flask_app.app import create_app
from flask_app.rag.prompts import NO_CONTEXT_ANSWER
from flask_app.services import load_services
from flask_app.settings import Settings
from tests.test_answer_api import events_of

pytestmark = pytest.mark.real_model

# The evaluation set's passages (benches/eval): realistic, and the answers
# below are among those the evaluation reports as correct.
DOCS = json.loads(
    (Path(__file__).parents[1] / "benches/quality/eval/own/documents.json").read_text()
)["documents"]


@pytest.fixture(scope="module")
def client(
    real_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FlaskClient]:
    settings = Settings.load(
        {
            "data_dir": tmp_path_factory.mktemp("real") / "data",
            "model_dir": real_settings.model_dir,
        },
        {},
    )
    app = create_app(settings, load_services(settings))
    with app.test_client() as c:
        assert c.post("/upload", json={"store_mode": "text", "items": DOCS}).status_code == 200
        yield c


def test_answer_is_grounded_with_sources(client: FlaskClient) -> None:
    body = client.post(
        "/answer", json={"query": "When did the Harlow Bridge open to traffic?", "temperature": 0}
    ).get_json()
    assert "1998" in body["answer"]
    assert body["sources"][0]["id"] == "harlow-bridge"
    assert body["model"] == "qwen2.5-coder-0.5b-instruct-awq:q4_0"
    assert body["usage"]["prompt_tokens"] > 50


def test_stream_is_grounded_and_deltas_join(client: FlaskClient) -> None:
    r = client.post(
        "/answer/stream",
        json={"query": "When did the Harlow Bridge open to traffic?", "temperature": 0},
    )
    events = events_of(r.data)
    assert events[0][0] == "meta" and events[-1][0] == "done"
    tokens = [d["delta"] for e, d in events if e == "token"]
    assert len(tokens) > 2
    assert "".join(tokens) == events[-1][1]["answer"]
    assert "1998" in events[-1][1]["answer"]


def test_the_questions_own_words_are_not_sent_as_its_answer(client: FlaskClient) -> None:
    """Over this set's passages the 0.5B's every candidate answer to it is
    "Wi-Fi network", which the verifier scored 0.92: it says nothing the
    question did not, so it is never chosen (rag.choice.restates). Right
    or declined, never the question's words back."""
    query = "What is the name of the office guest Wi-Fi network?"
    for route in ("/answer", "/answer/stream"):
        r = client.post(route, json={"query": query, "temperature": 0})
        answer = (
            r.get_json()["answer"] if route == "/answer" else events_of(r.data)[-1][1]["answer"]
        )
        assert answer == NO_CONTEXT_ANSWER or "Calder-Guest" in answer, (route, answer)


def test_off_topic_question_gets_the_fixed_sentence(client: FlaskClient) -> None:
    """The default model knows the answer (Canberra) but the stored passages do
    not hold it: the answerability probe declines."""
    body = client.post("/answer", json={"query": "What is the capital of Australia?"}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER
    assert body["answerable_probability"] is not None


def ask_stream(client: FlaskClient, query: str) -> str:
    events = events_of(client.post("/answer/stream", json={"query": query}).data)
    assert events[-1][0] == "done", events[-1]
    answer: str = events[-1][1]["answer"]
    return answer


@pytest.fixture
def fresh(real_settings: Settings, tmp_path: Path) -> Iterator[FlaskClient]:
    settings = Settings.load(
        {"data_dir": tmp_path / "data", "model_dir": real_settings.model_dir}, {}
    )
    services = load_services(settings)
    with create_app(settings, services).test_client() as c:
        yield c
    services.store.close()


def test_the_kiosk_manager_and_the_museum_closing_day_are_answered(fresh: FlaskClient) -> None:
    """Both were refused by the earlier answerability check (P(yes) 0.38, 0.33)."""
    kiosk = "The kiosk's phone number is 555-0142 and its manager is Dana Ortiz."
    museum = (
        "The Calder City Museum is open Tuesday to Sunday from 10:00 to 18:00 "
        "and closed on Mondays."
    )
    items = [{"id": "kiosk", "text": kiosk}, {"id": "museum", "text": museum}]
    assert fresh.post("/upload", json={"store_mode": "text", "items": items}).status_code == 200
    assert "Dana Ortiz" in ask_stream(fresh, "Who manages the kiosk?")
    assert "Monday" in ask_stream(fresh, "On which day is the museum closed?")
    # (an unanswerable question about the same documents: test_real_own_words)


def test_a_fixed_subset_of_the_evaluation_stays_above_a_floor(fresh: FlaskClient) -> None:
    """A loose guard on the README's numbers, in its three outcomes: the
    first questions of each set. Served through the verifier the 0.5B
    answered 12 and 13 of the 35 right in two runs, 3 to 5 wrong; the
    sampled candidates move a question or two between runs (the seed is
    the prompt's, the arithmetic over a partly cached prompt is not exact)."""
    from benches.quality import eval_sets
    from benches.quality.rag_eval import is_refusal, mentions

    answered = wrong = refused = n_answerable = n_unanswerable = 0
    for name in eval_sets.SETS:
        evset = eval_sets.load(name)
        docs = evset.passages()
        for lo in range(0, len(docs), 64):
            batch = {"store_mode": "text", "items": docs[lo : lo + 64]}
            assert fresh.post("/upload", json=batch).status_code == 200
        questions = evset.questions
        subset = [q for q in questions if q["expect"]][:5] + [
            q for q in questions if not q["expect"]
        ][:2]
        for q in subset:
            answer = ask_stream(fresh, q["q"])
            if q["expect"]:
                n_answerable += 1
                right = mentions(answer, q["expect"]) and not is_refusal(answer)
                answered += right
                wrong += not right and not is_refusal(answer)
            else:
                n_unanswerable += 1
                refused += is_refusal(answer)
        fresh.delete("/store")
    assert answered / n_answerable >= 0.25, (answered, n_answerable)
    assert wrong / n_answerable <= 0.2, (wrong, n_answerable)
    assert refused / n_unanswerable >= 0.7, (refused, n_unanswerable)  # the verifier acts
