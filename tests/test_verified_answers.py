"""Verified answers through every surface, with the scripted model: the
greedy answer and sampled ones from one read of the prompt, the verifier's
choice, its decline, and the confidence each surface reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.inference.presets import PRESETS
from flask_app.rag.choice import choose
from flask_app.rag.prompts import NO_CONTEXT_ANSWER
from flask_app.rag.verifier import Gate, Scored, Verifier, VerifierError, verifier_path
from flask_app.settings import Settings
from tests import stores
from tests.verifiers import scripted_verifier, verifier_dict
from tests.waiting import until_ready

WRONG = "The bridge opened in 1990."
RIGHT = "The bridge opened in 1998."
DOCS = [
    {"id": "bridge", "text": "The Harlow Bridge opened in 1998. It is 412 metres long."},
    {"id": "dogs", "text": "Dogs bark at the postman."},
]
QUESTION = "When did the Harlow Bridge open?"


def knows(prompt: str, answer: str) -> list[float]:
    """The scripted hidden state: high where the answer says 1998."""
    return [1.0 if "1998" in answer else -1.0]


def build(
    tmp_path: Path, backend: ScriptedBackend, gate: Gate | None = None, **verifier: Any
) -> tuple[Flask, ScriptedBackend]:
    """The app over DOCS, checked by `gate` (default: a scripted verifier of `verifier`)."""
    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    if gate is None:
        gate = Gate(scripted_verifier(**verifier), threshold=verifier.get("threshold", 0.5))
    services = stores.services(settings, LLM(backend, timeout=30), HashEmbedder(), gate=gate)
    app = create_app(settings, services)
    r = app.test_client().post("/upload", json={"store_mode": "text", "items": DOCS})
    assert r.status_code == 200
    return app, backend


def greedy_wrong_sample_right() -> ScriptedBackend:
    """The likeliest answer is wrong; the sampled ones are often right."""
    return ScriptedBackend(
        WRONG,
        candidates=lambda prompt: [(WRONG, 0.51), (RIGHT, 0.49)],
        answer_state=knows,
    )


def test_the_verifier_chooses_a_right_sample_over_a_wrong_greedy_answer(tmp_path: Path) -> None:
    app, backend = build(tmp_path, greedy_wrong_sample_right(), samples=5)
    body = app.test_client().post("/answer", json={"query": QUESTION}).get_json()
    assert body["answer"] == RIGHT
    assert body["answerable_probability"] == pytest.approx(0.982, abs=1e-3)  # sigmoid(4)
    # one request, its prompt read once: six branches decoded from it
    (request,) = backend.requests
    assert backend.engine.prompt_tokens_read == len(request.prompt)
    assert len(backend.prompts) == 1


def test_the_same_question_is_answered_the_same_way(tmp_path: Path) -> None:
    app, _ = build(tmp_path, greedy_wrong_sample_right(), samples=5)
    client = app.test_client()
    answers = {
        client.post("/answer", json={"query": QUESTION}).get_json()["answer"] for _ in range(3)
    }
    assert answers == {RIGHT}


def test_below_the_threshold_the_surface_declines(tmp_path: Path) -> None:
    backend = ScriptedBackend(WRONG, answer_state=knows)
    app, _ = build(tmp_path, backend, samples=2)
    body = app.test_client().post("/answer", json={"query": QUESTION}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER
    # the confidence is the best answer's, which fell short
    assert body["answerable_probability"] == pytest.approx(0.018, abs=1e-3)


def test_a_sure_greedy_answer_needs_no_samples(tmp_path: Path) -> None:
    backend = ScriptedBackend(RIGHT, answer_state=knows)
    app, _ = build(tmp_path, backend, samples=4, accept=0.9)
    body = app.test_client().post("/answer", json={"query": QUESTION}).get_json()
    assert body["answer"] == RIGHT
    (job,) = backend.engine.jobs
    assert len(job.branches) == 1  # no sampled answer was written


def test_a_question_the_documents_hardly_hold_is_declined_before_writing(tmp_path: Path) -> None:
    backend = ScriptedBackend(
        RIGHT, answer_state=knows, hidden_state=lambda prompt: [-2.0], token_delay=0.05
    )
    app, _ = build(tmp_path, backend, answerable=True, skip_below=0.1)
    body = app.test_client().post("/answer", json={"query": QUESTION}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER and body["answerable_probability"] is None
    assert backend.closed_early == 1  # stopped at its first token
    gate = app.test_client().get("/health").get_json()["llm"]["answer_gate"]
    assert gate["kind"] == "verifier" and gate["floor"] == 0.1


def test_an_answer_longer_than_the_candidates_goes_on_once_chosen(tmp_path: Path) -> None:
    long = RIGHT + " It is 412 metres long and crosses the Harlow river near the old mill."
    backend = ScriptedBackend(long, answer_state=lambda prompt, answer: [1.0])
    app, _ = build(tmp_path, backend, samples=0, candidate_tokens=4)
    client = app.test_client()
    assert client.post("/answer", json={"query": QUESTION}).get_json()["answer"] == long
    events = stream_events(client.post("/answer/stream", json={"query": QUESTION}).data)
    deltas = "".join(d["delta"] for e, d in events if e == "token")
    assert deltas == long == events[-1][1]["answer"]


def test_the_models_own_refusal_is_never_the_chosen_answer(tmp_path: Path) -> None:
    backend = ScriptedBackend(
        NO_CONTEXT_ANSWER,
        candidates=lambda prompt: [(NO_CONTEXT_ANSWER, 0.6), (RIGHT, 0.4)],
        answer_state=lambda prompt, answer: [3.0],  # the verifier would pass anything
    )
    app, _ = build(tmp_path, backend, samples=6)
    body = app.test_client().post("/answer", json={"query": QUESTION}).get_json()
    assert body["answer"] == RIGHT


def stream_events(data: bytes) -> list[tuple[str, Any]]:
    out = []
    for block in data.decode().split("\n\n"):
        if block.strip():
            lines = block.split("\n")
            out.append((lines[0][7:], json.loads(lines[1][6:])))
    return out


def test_every_surface_answers_and_declines_through_the_verifier(tmp_path: Path) -> None:
    right = build(tmp_path / "right", greedy_wrong_sample_right(), samples=5)[0].test_client()
    never = ScriptedBackend(WRONG, answer_state=knows)
    wrong = build(tmp_path / "wrong", never, samples=1)[0].test_client()
    documents = [{"body": DOCS[0]["text"], "source": "http://bridge"}]
    lucid = {"batch": [{"text": QUESTION, "documents": documents}]}
    path = "/ai/prediction/rag/llama-3-8b-instruct"
    got = right.post(path, json=lucid).get_json()["predictions"][0]
    assert got["answerFound"] is True and got["answer"] == RIGHT
    got = wrong.post(path, json=lucid).get_json()["predictions"][0]
    assert got["answerFound"] is False
    rag = {"collection": "moorcheh-edge"}
    chat = {"model": "m", "messages": [{"role": "user", "content": QUESTION}], "rag": rag}
    got = right.post("/v1/chat/completions", json=chat).get_json()
    assert "choices" in got, got
    assert got["choices"][0]["message"]["content"] == RIGHT
    assert got["rag"]["answerable_probability"] == pytest.approx(0.982, abs=1e-3)
    got = wrong.post("/v1/chat/completions", json=chat).get_json()
    assert got["rag"]["refused"] is True
    for client, expected in ((right, RIGHT), (wrong, None)):
        client.put("/namespaces/ops")
        client.put("/namespaces/ops/collections/notes")
        r = client.post(
            "/namespaces/ops/collections/notes/files",
            json={"path": "bridge.md", "content_type": "text/markdown", "text": DOCS[0]["text"]},
        )
        assert r.status_code == 202
        until_ready(client, "/namespaces/ops/collections/notes")
        body = client.post(
            "/namespaces/ops/collections/notes:answer", json={"query": QUESTION}
        ).get_json()
        if expected is None:
            assert "does not contain" in body["answer"]
        else:
            assert body["answer"].startswith(expected.rstrip("."))
        assert body["answerable_probability"] is not None


def prompt_only(weight: float, threshold: float = 0.5) -> Gate:
    """The verifier of a preset without answer rows: its prompt's answerability only."""
    data = verifier_dict(samples=0, threshold=threshold, skip_below=threshold)
    data["correct"] = None
    data["answerable"] = {"layer": 3, "reads": "prompt", "weights": [weight], "bias": 0.0}
    data["combine"] = {"weights": {"answerable": 1.0}, "bias": 0.0, "fill": {}}
    return Gate(Verifier.from_dict(data), threshold=threshold)


@pytest.mark.parametrize(("state", "answered"), [(1.0, True), (-1.0, False)])
def test_a_verifier_of_the_prompt_alone_answers_or_declines_on_its_answerability(
    tmp_path: Path, state: float, answered: bool
) -> None:
    backend = ScriptedBackend(RIGHT, hidden_state=lambda prompt: [state], token_delay=0.01)
    app, _ = build(tmp_path, backend, gate=prompt_only(3.0))
    body = app.test_client().post("/answer", json={"query": QUESTION}).get_json()
    assert body["answer"] == (RIGHT if answered else NO_CONTEXT_ANSWER)
    if answered:  # the confidence is the prompt's answerability, sigmoid(3)
        assert body["answerable_probability"] == pytest.approx(0.953, abs=1e-3)
    else:  # declined before any answer was written, at the prompt's answerability
        assert backend.closed_early == 1
        assert body["answerable_probability"] == pytest.approx(0.047, abs=1e-3)


def test_a_verifier_of_the_prompt_alone_never_sends_the_models_refusal_as_an_answer(
    tmp_path: Path,
) -> None:
    backend = ScriptedBackend(NO_CONTEXT_ANSWER + " Sorry.", hidden_state=lambda prompt: [1.0])
    app, _ = build(tmp_path, backend, gate=prompt_only(3.0))
    body = app.test_client().post("/answer", json={"query": QUESTION}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER
    assert body["answerable_probability"] is None  # no answer was there to be right


def test_a_verifier_file_reading_neither_answer_nor_prompt_is_refused() -> None:
    data = verifier_dict()
    data["correct"] = None
    with pytest.raises(VerifierError, match="neither"):
        Verifier.from_dict(data)


def test_the_questions_own_words_are_not_an_answer_even_when_the_verifier_is_sure(
    tmp_path: Path,
) -> None:
    """ "Harlow Bridge open" says nothing the question did not: samples are
    written although the verifier passes it (P 0.98 ≥ accept), and one of
    them is chosen."""
    backend = ScriptedBackend(
        "Harlow Bridge open",
        candidates=lambda prompt: [("Harlow Bridge open", 0.6), (RIGHT, 0.4)],
        answer_state=lambda prompt, answer: [1.0],
    )
    app, _ = build(tmp_path, backend, samples=6, accept=0.9)
    body = app.test_client().post("/answer", json={"query": QUESTION}).get_json()
    assert body["answer"] == RIGHT


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("Did the Harlow Bridge open?", "The Harlow Bridge did open."),  # yes or no
        ("Did the bridge open in 1998 or in 1990?", "In 1998."),  # A or B
    ],
)
def test_a_question_whose_answer_is_its_own_words_is_answered(
    tmp_path: Path, query: str, answer: str
) -> None:
    backend = ScriptedBackend(answer, answer_state=lambda prompt, answer: [1.0])
    app, _ = build(tmp_path, backend, samples=0)
    body = app.test_client().post("/answer", json={"query": query}).get_json()
    assert body["answer"] == answer


@pytest.mark.parametrize(
    ("scored", "chosen"),
    [
        # one answer written twice outweighs a likelier one written once
        (
            [
                (0, "Manchester United won.", 0.555),
                (1, "Chelsea won.", 0.78),
                (2, "manchester united  won!", 0.556),
            ],
            (0, 0.556),
        ),
        ([(0, "In 1990.", 0.5), (1, "In 1998.", 0.7)], (1, 0.7)),
        ([(0, "In 1990.", 0.6), (1, "In 1998.", 0.6)], (0, 0.6)),  # a tie: the greedy one
        # a refusal and the question's own words are never chosen
        ([(0, NO_CONTEXT_ANSWER, 0.9), (1, "In 1998.", 0.3)], (1, 0.3)),
        ([(0, "The Harlow Bridge opened.", 0.9), (1, "In 1998.", 0.3)], (1, 0.3)),
        ([(0, NO_CONTEXT_ANSWER, 0.9)], None),
    ],
)
def test_the_answer_whose_candidates_sum_likeliest_is_chosen(
    scored: list[tuple[int, str, float]], chosen: tuple[int, float] | None
) -> None:
    best = choose([Scored(*s) for s in scored], "When did the Harlow Bridge open?")
    assert (None if best is None else (best.index, best.probability)) == chosen
    if best is not None:
        assert best.text == scored[best.index][1]


def test_a_sampled_answer_replaces_the_greedy_one_when_likelier(tmp_path: Path) -> None:
    """P(greedy) = sigmoid(1.0) = 0.731, P(sample) = sigmoid(1.1) = 0.750."""
    backend = ScriptedBackend(
        WRONG,
        candidates=lambda prompt: [(RIGHT, 1.0)],
        answer_state=lambda prompt, answer: [0.275 if "1998" in answer else 0.25],
    )
    app, _ = build(tmp_path, backend, samples=1)
    body = app.test_client().post("/answer", json={"query": QUESTION}).get_json()
    assert body["answer"] == RIGHT
    assert body["answerable_probability"] == pytest.approx(0.750, abs=1e-3)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_ships_a_verifier_for_its_default_file(preset: str) -> None:
    shipped = Verifier.read(verifier_path(preset))
    default = PRESETS[preset]
    assert shipped.preset == preset
    assert shipped.gguf_sha256 == default.files()[default.default_quant].sha256
