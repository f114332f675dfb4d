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
DOCS = json.loads((Path(__file__).parents[1] / "benches/eval/own/documents.json").read_text())[
    "documents"
]


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
        json={"query": "What is the name of the office guest Wi-Fi network?", "temperature": 0},
    )
    events = events_of(r.data)
    assert events[0][0] == "meta" and events[-1][0] == "done"
    tokens = [d["delta"] for e, d in events if e == "token"]
    assert len(tokens) > 2
    assert "".join(tokens) == events[-1][1]["answer"]
    assert "Calder-Guest" in events[-1][1]["answer"]


def test_off_topic_question_gets_the_fixed_sentence(client: FlaskClient) -> None:
    body = client.post("/answer", json={"query": "What is the capital of Australia?"}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER


def test_on_topic_but_unanswerable_question_is_declined(client: FlaskClient) -> None:
    body = client.post(
        "/answer", json={"query": "Who designed the Harlow Bridge?", "temperature": 0}
    ).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER
    assert body["answer_check"] is not None and body["answer_check"] < 0.38
