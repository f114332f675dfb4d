"""The answerability probe: its file, the gate it drives on every surface (a
fake model whose hidden state is scripted), and how a server picks it."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_app.api.engine import answer as engine_answer
from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.rag import prompts
from flask_app.rag.answerability import (
    FORMAT,
    AnswerProbe,
    Gate,
    ProbeError,
    Signals,
    choose_gate,
)
from flask_app.rag.prompts import NO_CONTEXT_ANSWER
from flask_app.services import Services
from flask_app.settings import Settings, SettingsError
from tests import stores

WIDTH = 8
LAYER = 5
ANSWER = "The spare key is with the neighbour at number 12."
DOCUMENT = "The spare key is with the neighbour at number 12. Bins go out on Tuesday evening."


def probe_dict(**changes: Any) -> dict[str, Any]:
    """A probe reading one layer: P(right) = sigmoid(2 × state[0] − 1 × refusal logit)."""
    weights = [0.0] * WIDTH
    weights[0] = 1.0
    doc: dict[str, Any] = {
        "format": FORMAT,
        "preset": "qwen2.5-coder-0.5b",
        "gguf": "model.gguf",
        "gguf_sha256": "0" * 64,
        "layer": LAYER,
        "hidden": {"weights": weights, "bias": 0.0},
        "combine": {
            "weights": {"hidden": 2.0, "refusal_logit": -1.0},
            "bias": 0.0,
            "fill": {"hidden": 0.0, "refusal_logit": -3.0},
        },
        "threshold": 0.5,
    }
    doc.update(changes)
    return doc


def state(first: float) -> list[float]:
    return [first] + [0.0] * (WIDTH - 1)


def test_probability_combines_the_hidden_score_and_the_signals() -> None:
    probe = AnswerProbe.from_dict(probe_dict())
    hidden = {LAYER: np.array(state(1.5), dtype=np.float32)}
    # refusal probability 0.5: logit 0
    p = probe.probability(Signals(hidden, refusal_probability=0.5))
    assert p == pytest.approx(1 / (1 + math.exp(-3.0)))
    # a missing signal takes its fill value (logit −3 → +3 on z)
    p = probe.probability(Signals(hidden))
    assert p == pytest.approx(1 / (1 + math.exp(-6.0)))
    # without the probe's layer there is no probability (the old gates decide)
    assert probe.probability(Signals({LAYER + 1: hidden[LAYER]})) is None
    assert probe.probability(Signals(None)) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 99}, "format 99"),
        ({"combine": {"weights": {"colour": 1.0}, "bias": 0.0, "fill": {}}}, "unknown signals"),
        ({"layer": "middle"}, "not a probe file"),
        ({"quote_refusals": "false"}, "quote_refusals must be true or false"),
        ({"quote_yes_no": 1}, "quote_yes_no must be true or false"),
    ],
)
def test_a_bad_probe_file_is_refused_with_the_reason(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ProbeError, match=message):
        AnswerProbe.from_dict(probe_dict(**change))


def write_probe(directory: Path, gguf: Path, **changes: Any) -> Path:
    import hashlib

    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    path = directory / "qwen2.5-coder-0.5b.json"
    path.write_text(json.dumps(probe_dict(gguf_sha256=digest, **changes)))
    return path


def test_the_probe_trained_on_this_file_is_chosen(tmp_path: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"weights")
    write_probe(tmp_path / "probes", gguf, threshold=0.37)
    gate = choose_gate("qwen2.5-coder-0.5b", gguf, None, tmp_path / "probes")
    assert gate.probe is not None and gate.threshold == 0.37
    assert gate.describe(0.3, 0.0)["kind"] == "probe"
    # --answer-probe moves the threshold; off (a threshold of 0) turns the probe off
    assert choose_gate("qwen2.5-coder-0.5b", gguf, 0.6, tmp_path / "probes").threshold == 0.6
    off = choose_gate("qwen2.5-coder-0.5b", gguf, 0.0, tmp_path / "probes")
    assert off.probe is None and off.describe(0.3, 0.5) == {
        "kind": "refusal",
        "refusal_probability": 0.3,
        "judge": 0.5,
        "reason": "off (--answer-probe off)",
    }
    # a --model file (no preset) with the same bytes finds the probe by its hash
    assert choose_gate(None, gguf, None, tmp_path / "probes").probe is not None


def test_a_model_file_with_another_hash_warns_and_keeps_the_old_gates(tmp_path: Path) -> None:
    trained = tmp_path / "trained.gguf"
    trained.write_bytes(b"weights")
    write_probe(tmp_path / "probes", trained)
    other = tmp_path / "requantized.gguf"
    other.write_bytes(b"other weights")
    warned: list[str] = []
    gate = choose_gate("qwen2.5-coder-0.5b", other, None, tmp_path / "probes", warned.append)
    assert gate.probe is None
    assert warned == [gate.reason]
    assert "qwen2.5-coder-0.5b" in warned[0] and str(other) in warned[0]
    assert "benches/answer_probe.py build --llms qwen2.5-coder-0.5b" in warned[0]


def test_the_file_hash_is_remembered_until_the_file_changes(tmp_path: Path) -> None:
    from flask_app.inference.pull import known_sha256

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"weights")
    first = known_sha256(gguf)
    stamp = tmp_path / "model.gguf.sha256"
    assert json.loads(stamp.read_text())["sha256"] == first
    gguf.write_bytes(b"other weights!")  # another size: read again
    assert known_sha256(gguf) != first


def test_answer_probe_setting_is_checked() -> None:
    assert Settings.load({"answer_probe": 0.4}, {}).answer_probe == 0.4
    off = Settings.load({}, {"EDGERAG_ANSWER_PROBE": "off"})
    assert off.answer_probe == "off" and off.probe_threshold() == 0.0
    with pytest.raises(SettingsError, match=r"answer_probe must be 0\.\.1"):
        Settings.load({"answer_probe": 1.5}, {})


# --- every surface declines through the probe -------------------------------------------

KNOWN = "spare key"  # questions holding these words get a confident hidden state


def scripted_state(prompt: str) -> list[float]:
    question = prompt.rsplit("Question:", 1)[-1]
    return state(3.0 if KNOWN in question.lower() else -3.0)


def probe_gated_app(
    tmp_path: Path, backend: ScriptedBackend, threshold: float, **probe_changes: Any
) -> Flask:
    """An app whose gate is the test probe (with `probe_changes` to its
    file) at `threshold`, holding DOCUMENT."""
    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    probe = AnswerProbe.from_dict(probe_dict(**probe_changes))
    services: Services = stores.services(
        settings,
        LLM(backend, max_waiters=2, timeout=10.0),
        HashEmbedder(),
        gate=Gate(probe, threshold=threshold),
    )
    app = create_app(settings, services)
    r = app.test_client().post(
        "/upload", json={"store_mode": "text", "items": [{"id": "house", "text": DOCUMENT}]}
    )
    assert r.status_code == 200
    return app


@pytest.fixture
def gated(tmp_path: Path) -> tuple[Flask, FlaskClient, ScriptedBackend]:
    # refusal probability 0.1: below the refusal gate (0.3), logit −2.2 in the probe
    backend = ScriptedBackend(ANSWER, hidden_state=scripted_state, refusal_probability=0.1)
    app = probe_gated_app(tmp_path, backend, threshold=0.5)
    return app, app.test_client(), backend


def test_moorcheh_answer_declines_through_the_probe(
    gated: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    _, client, _ = gated
    body = client.post("/answer", json={"query": "Where is the spare key?"}).get_json()
    assert body["answer"] == ANSWER
    z = 2.0 * 3.0 - math.log(0.1 / 0.9)
    assert body["answerable_probability"] == pytest.approx(1 / (1 + math.exp(-z)))
    body = client.post("/answer", json={"query": "What does the bin collection cost?"}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER
    assert body["answerable_probability"] < 0.5
    assert body["context_count"] == 1  # the model read the passage; the probe declined


def test_a_follow_up_question_is_left_to_the_refusal_gate(
    gated: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    """The probe learnt single questions: with a chat history it does not
    decide (the refusal probability, 0.1, is under its gate)."""
    _, client, _ = gated
    history = [
        {"role": "user", "content": "Where is the spare key?"},
        {"role": "assistant", "content": ANSWER},
    ]
    body = {"query": "What does the bin collection cost?", "chat_history": history}
    reply = client.post("/answer", json=body).get_json()
    assert reply["answer"] == ANSWER
    assert reply["answerable_probability"] is None


def test_the_health_and_info_routes_name_the_probe(
    gated: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    _, client, _ = gated
    gate = client.get("/health").get_json()["llm"]["answer_gate"]
    assert gate == {
        "kind": "probe",
        "threshold": 0.5,
        "layer": LAYER,
        "signals": ["hidden", "refusal_logit"],
        "quote_refusals": False,
        "quote_yes_no": False,
        "file": None,
    }
    assert client.get("/info").get_json()["models"]["llm"]["answer_gate"] == gate


LUCIDWORKS = "/ai/prediction/rag/llama-3-8b-instruct"


def test_lucidworks_declines_through_the_probe(
    gated: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    _, client, backend = gated
    backend._reply = f"SOURCES:\n- 0\nANSWER: {ANSWER}"
    document = {"body": DOCUMENT, "source": "http://example.com/house"}
    for text, found in (("Where is the spare key?", True), ("How much is the parking fee?", False)):
        body = {"batch": [{"text": text, "documents": [document]}]}
        r = client.post(LUCIDWORKS, json=body)
        assert r.status_code == 200, r.get_json()
        prediction = r.get_json()["predictions"][0]
        assert prediction["answerFound"] is found, (text, prediction)
        if not found:
            assert prediction["sources"] == []
            assert prediction["tokensUsed"]["completionTokens"] == 0


def engine_notes(app: Flask, client: FlaskClient) -> str:
    """An Engine collection holding DOCUMENT as a file, ingested: its
    `:answer` URL."""
    from flask_app.api.http.extensions import collections_of

    client.put("/namespaces/home")
    client.put("/namespaces/home/collections/notes")
    house = {"path": "house.md", "content_type": "text/markdown", "text": DOCUMENT}
    assert client.post("/namespaces/home/collections/notes/files", json=house).status_code == 202
    with app.app_context():
        assert collections_of(app).ingestor.wait_idle(30)
    return "/namespaces/home/collections/notes:answer"


def test_engine_answer_declines_through_the_probe(
    gated: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    app, client, _ = gated
    url = engine_notes(app, client)
    body = client.post(url, json={"query": "Where is the spare key?"}).get_json()
    assert body["answer"].startswith("The spare key") and body["answerable_probability"] > 0.5
    body = client.post(url, json={"query": "What is the landlord's phone number?"}).get_json()
    assert body["answer"] == engine_answer.NOT_FOUND_ANSWER
    assert body["answerable_probability"] < 0.5


def test_openai_grounded_reply_declines_through_the_probe(
    gated: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    _, client, _ = gated
    for text, refused in (("Where is the spare key?", False), ("Who owns the house?", True)):
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": text}],
            "rag": {"collection": "moorcheh-edge"},
        }
        reply = client.post("/v1/chat/completions", json=body).get_json()
        rag = reply["rag"]
        assert rag["refused"] is refused, reply
        assert (rag["answerable_probability"] < 0.5) is refused
        if refused:
            assert reply["choices"][0]["message"]["content"] == NO_CONTEXT_ANSWER


def test_without_a_hidden_state_the_refusal_gate_decides(tmp_path: Path) -> None:
    """A backend that cannot read the hidden state (None) leaves the old gates in charge."""
    backend = ScriptedBackend(ANSWER, refusal_probability=0.9)  # no hidden_state
    client = probe_gated_app(tmp_path, backend, threshold=0.01).test_client()
    body = client.post("/answer", json={"query": "Where is the spare key?"}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER  # refusal probability 0.9 > 0.3
    assert body["answerable_probability"] is None


def test_each_preset_ships_a_probe_for_the_file_it_serves() -> None:
    """The shipped probe files name the sha256 of their preset's default file,
    which `edgerag pull` checks: a pulled model meets its own probe."""
    from flask_app.inference.presets import PRESETS
    from flask_app.rag.answerability import probe_path

    for preset in PRESETS.values():
        probe = AnswerProbe.read(probe_path(preset.name))
        served = preset.files()[preset.default_quant]
        assert probe.preset == preset.name
        assert probe.gguf_sha256 == served.sha256, preset.name
        assert 0 < probe.threshold < 1


def test_a_model_about_to_refuse_is_declined_when_the_probe_passes(
    gated: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    """The probe says the documents hold it, the first token says the model
    refuses: the fixed sentence (a yes-or-no question: its closest line)."""
    _, client, backend = gated
    backend.refusal_probability = 0.9
    body = client.post("/answer", json={"query": "Where is the spare key?"}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER
    assert body["answerable_probability"] > 0.5
    body = client.post("/answer", json={"query": "Is the spare key with the neighbour?"})
    assert body.get_json()["answer"].startswith("The documents do not answer this directly")


def quoting_app(tmp_path: Path, refusal_probability: float, **quotes: bool) -> Flask:
    """The probe-gated app, its probe fitted with `quotes` (quote_refusals,
    quote_yes_no), its model's first token giving a refusal `refusal_probability`."""
    backend = ScriptedBackend(
        ANSWER, hidden_state=scripted_state, refusal_probability=refusal_probability
    )
    return probe_gated_app(tmp_path, backend, 0.5, **quotes)


def lucidworks_prediction(client: FlaskClient, question: str) -> dict[str, Any]:
    """The Lucidworks RAG prediction for `question` over DOCUMENT, sent with it."""
    document = {"body": DOCUMENT, "source": "http://example.com/house"}
    batch = {"batch": [{"text": question, "documents": [document]}]}
    prediction: dict[str, Any] = client.post(LUCIDWORKS, json=batch).get_json()["predictions"][0]
    return prediction


def test_a_probe_fitted_with_yes_no_quotes_answers_a_yes_or_no_question_with_the_best_line(
    tmp_path: Path,
) -> None:
    """A probe file with "quote_yes_no": a yes-or-no question the probe lets
    through is answered with the best evidence line, not the model's verdict,
    on /answer and /answer/stream alike; other questions keep the model's
    answer; a question the probe declines is declined; /health says so."""
    app = quoting_app(tmp_path, refusal_probability=0.1, quote_yes_no=True)
    client = app.test_client()
    quoted = f'The documents say: "{DOCUMENT}"'
    body = client.post("/answer", json={"query": "Is the spare key with the neighbour?"})
    assert body.get_json()["answer"] == quoted
    assert body.get_json()["answerable_probability"] > 0.5
    stream = client.post("/answer/stream", json={"query": "Is the spare key with the neighbour?"})
    events = [line for line in stream.data.decode().split("\n") if line.startswith("data: ")]
    deltas = [json.loads(e[6:]).get("delta") for e in events]
    assert "".join(d for d in deltas if d) == quoted
    body = client.post("/answer", json={"query": "Where is the spare key?"}).get_json()
    assert body["answer"] == ANSWER  # not a yes-or-no question: the model answers
    body = client.post("/answer", json={"query": "Is the bin collection free?"}).get_json()
    assert not body["answer"].startswith("The documents say")  # the probe declined
    assert body["answerable_probability"] < 0.5
    assert client.get("/health").get_json()["llm"]["answer_gate"]["quote_yes_no"] is True
    # Lucidworks: the quote is an answer found
    prediction = lucidworks_prediction(client, "Is the spare key with the neighbour?")
    assert prediction["answerFound"] is True, prediction
    assert quoted in prediction["response"]


def test_a_probe_fitted_with_quotes_quotes_the_best_line_instead_of_a_refusal(
    tmp_path: Path,
) -> None:
    """A probe file with "quote_refusals": the probe passes, the first token
    says the model refuses: the best evidence line is the answer (a yes-or-no
    question's too); the probe declining still gives the fixed sentence."""
    app = quoting_app(tmp_path, refusal_probability=0.9, quote_refusals=True)
    client = app.test_client()
    quoted = f'The documents say: "{DOCUMENT}"'  # one short paragraph: one unit
    for query in ("Where is the spare key?", "Is the spare key with the neighbour?"):
        body = client.post("/answer", json={"query": query}).get_json()
        assert body["answer"] == quoted, query
        assert body["answerable_probability"] > 0.5
    body = client.post("/answer", json={"query": "What does the bin collection cost?"}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER
    assert client.get("/health").get_json()["llm"]["answer_gate"]["quote_refusals"] is True
    # Lucidworks: the quote is an answer found, from the document holding it
    prediction = lucidworks_prediction(client, "Where is the spare key?")
    assert prediction["answerFound"] is True, prediction
    assert quoted in prediction["response"]
    assert prediction["sources"] == ["http://example.com/house"], prediction
    # Engine: the quote, cited at the span of the file that holds it
    url = engine_notes(app, client)
    body = client.post(url, json={"query": "Where is the spare key?"}).get_json()
    assert body["answer"].startswith(quoted), body
    assert [s["path"] for s in body["sources"] if s["cited"]] == ["house.md"], body
    # a follow-up is left to the refusal gate, which does not quote
    history = [
        {"role": "user", "content": "Where is the key?"},
        {"role": "assistant", "content": "x"},
    ]
    body = client.post(
        "/answer", json={"query": "Where is the spare key?", "chat_history": history}
    )
    assert body.get_json()["answer"] == NO_CONTEXT_ANSWER

    # a best line that states nothing (a heading) is not an answer: declined
    heading = {"store_mode": "text", "items": [{"id": "h", "text": "Spare key notes."}]}
    assert client.delete("/store").status_code == 200
    assert client.post("/upload", json=heading).status_code == 200
    body = client.post("/answer", json={"query": "Where is the spare key?"}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER, body


# --- a client's own prompts -------------------------------------------------------


def fooled_state(prompt: str) -> list[float]:
    """The probe read as the real 0.5B's reads: right over the prompt it was
    fitted on, confident about every question over any other system prompt."""
    if prompts.DEFAULT_SYSTEM_PROMPT not in prompt:
        return state(3.0)
    return scripted_state(prompt)


@pytest.fixture
def fooled(tmp_path: Path) -> tuple[Flask, FlaskClient, ScriptedBackend]:
    backend = ScriptedBackend(ANSWER, hidden_state=fooled_state, refusal_probability=0.1)
    app = probe_gated_app(tmp_path, backend, threshold=0.5)
    return app, app.test_client(), backend


CLIENT_PROMPTS = {"header_prompt": "You are a helpful assistant.", "footer_prompt": "Be brief."}


def test_a_clients_own_prompts_leave_the_probe_reading_the_prompt_it_was_fitted_on(
    fooled: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    """moorcheh's header_prompt replaces the system prompt (and its refusal
    rule): the probe reads the same passages and question under the default
    system prompt, without the footer, and the answer is generated from
    the client's prompt."""
    _, client, backend = fooled
    asked = {"query": "What does the bin collection cost?", **CLIENT_PROMPTS}
    body = client.post("/answer", json=asked).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER, body
    assert body["answerable_probability"] < 0.5
    read, answered = backend.prompts[-2:]
    assert prompts.DEFAULT_SYSTEM_PROMPT in read and "Be brief." not in read
    assert "You are a helpful assistant." in answered and "Be brief." in answered
    assert prompts.REFUSAL_RULE not in answered
    assert read.split("Question:")[-1] == answered.split("Question:")[-1]
    body = client.post("/answer", json={**asked, "query": "Where is the spare key?"}).get_json()
    assert body["answer"] == ANSWER and body["answerable_probability"] > 0.5
    # the stream reads the same way
    stream = client.post("/answer/stream", json=asked)
    assert NO_CONTEXT_ANSWER in stream.data.decode()


def test_the_default_prompt_is_read_once(
    fooled: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    """Without a client's prompts the answer's own prefill is the probe's:
    one generation per question."""
    _, client, backend = fooled
    before = len(backend.prompts)
    body = client.post("/answer", json={"query": "What does the bin collection cost?"})
    assert body.get_json()["answer"] == NO_CONTEXT_ANSWER
    assert len(backend.prompts) == before + 1


def test_engine_instructions_leave_the_probe_reading_the_prompt_it_was_fitted_on(
    fooled: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    """Engine's `instructions` replace the answer's style, which the probe
    was not fitted with either; so do an OpenAI chat's system messages."""
    app, client, backend = fooled
    url = engine_notes(app, client)
    ask = {"query": "What is the landlord's phone number?", "instructions": "Answer in French."}
    body = client.post(url, json=ask).get_json()
    assert body["answer"] == engine_answer.NOT_FOUND_ANSWER, body
    assert "Answer in French." in backend.prompts[-1]
    chat = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Who owns the house?"},
        ],
        "rag": {"collection": "moorcheh-edge"},
    }
    reply = client.post("/v1/chat/completions", json=chat).get_json()
    assert reply["rag"]["refused"] is True, reply


def differences(made: Any, shipped: Any, where: str = "") -> list[str]:
    """Where two JSON documents differ: numbers by more than 1e-9 of their
    size (BLAS kernels differ between CPUs in the last bits of a fit),
    everything else at all."""
    if isinstance(made, dict) and isinstance(shipped, dict):
        if made.keys() != shipped.keys():
            return [f"{where}: keys {sorted(made)} != {sorted(shipped)}"]
        return [d for k in made for d in differences(made[k], shipped[k], f"{where}/{k}")]
    if isinstance(made, list) and isinstance(shipped, list):
        if len(made) != len(shipped):
            return [f"{where}: {len(made)} items != {len(shipped)}"]
        return [
            d
            for i, pair in enumerate(zip(made, shipped, strict=True))
            for d in differences(*pair, f"{where}/{i}")
        ]
    if isinstance(made, float) and isinstance(shipped, float):
        close = math.isclose(made, shipped, rel_tol=1e-9, abs_tol=1e-12)
        return [] if close else [f"{where}: {made!r} != {shipped!r}"]
    return (
        []
        if made == shipped and type(made) is type(shipped)
        else [f"{where}: {made!r} != {shipped!r}"]
    )


def test_differences_finds_a_weight_moved_by_a_millionth() -> None:
    doc = {"hidden": {"weights": [0.25, -0.0125], "bias": 1.5}, "layer": 13, "gguf": "x"}
    assert differences(doc, json.loads(json.dumps(doc))) == []
    moved = {**doc, "hidden": {"weights": [0.25, -0.0125 * (1 + 1e-6)], "bias": 1.5}}
    assert differences(moved, doc) == [f"/hidden/weights/1: {-0.0125 * (1 + 1e-6)!r} != -0.0125"]
    assert differences({**doc, "layer": 12}, doc) == ["/layer: 12 != 13"]
    assert differences({**doc, "layer": 13.0}, doc) != []


@pytest.mark.parametrize("preset", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_the_shipped_probe_rebuilds_from_the_committed_rows(preset: str) -> None:
    """`benches/answer_probe.py fit` over benches/results/answer_probe makes
    the file the package ships: byte for byte on the machine that made it,
    every number within 1e-9 of its size on another CPU (numpy's OpenBLAS
    picks its kernels by CPU, and they round differently in the last bits)."""
    from benches.answer_probe import probe_document
    from flask_app.rag.answerability import probe_path

    made, shipped = probe_document(preset), probe_path(preset).read_text()
    assert differences(json.loads(made), json.loads(shipped)) == []


def test_the_test_frontier_reads_the_dev_thresholds_of_the_probe_a_run_used() -> None:
    """benches/probe_test_frontier.py: the shipped probe's dev frontier comes
    from the committed rows (its own target gives its threshold); a run of
    another fit is refused rather than read at thresholds that are not its."""
    from benches.probe_test_frontier import dev_frontier
    from flask_app.rag.answerability import probe_path

    shipped = json.loads(probe_path("qwen2.5-coder-0.5b").read_text())["threshold"]
    points = dict(dev_frontier("qwen2.5-coder-0.5b", {"probe_fitted_threshold": shipped}))
    assert math.isclose(points[80], shipped, rel_tol=1e-6)  # the 0.5B ships at its 80% target
    assert list(points.values()) == sorted(points.values())
    with pytest.raises(SystemExit, match=r"fitted to 0\.3,"):
        dev_frontier("qwen2.5-coder-0.5b", {"probe_fitted_threshold": 0.3})
    assert dev_frontier("qwen2.5-coder-0.5b", {"evidence_alone_words": 15})[2] == (80, 0.3168)
    # a probe since refitted, whose run recorded its fitted threshold: the
    # frontier of the rows committed with it (it shipped at its 92% target)
    before = dict(dev_frontier("qwen2.5-coder-1.5b", {"probe_fitted_threshold": 0.6140811746}))
    assert before[92] == 0.6140811746538174


def test_the_test_frontier_answers_a_yes_or_no_question_with_its_recorded_line() -> None:
    """probe_test_frontier.served with `yes_no`: a yes-or-no question the
    probe passes is answered by its recorded line, whatever the model said;
    other questions keep the model's answer."""
    from benches.probe_test_frontier import served

    def row(question: str, answer: str, quote: str | None) -> dict[str, Any]:
        return {
            "set": "town-notices",
            "question": question,
            "expected": ["closed"],
            "answerable_probability": 0.9,
            "refusal_probability": 0.01,
            "answer": answer,
            "correct": "closed" in answer,
            "quote": quote,
        }

    monday = "The library is closed on Mondays."
    rows = [
        row("Can I go to the library on a Monday?", "Yes, you can.", monday),
        row("When is the library closed?", "It is closed on Mondays.", "Opening hours apply."),
    ]
    assert served(rows, 0.5, 0.3) == "– / 50%"
    assert served(rows, 0.5, 0.3, yes_no=True) == "– / 100%"


def test_the_test_frontier_gates_a_quoting_probe_with_the_lines_the_run_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """benches/probe_test_frontier.py on an ungated run whose probe quotes
    refusals: a row the probe passes whose first token refuses is answered
    by its recorded line (right when the line holds the fact; an
    unanswerable question counts as declined only without a line); below
    the threshold every row is declined. A run without the lines is refused."""
    from benches import probe_test_frontier
    from benches.probe_test_frontier import served

    def row(
        expected: list[str] | None, p: float, refusal: float, answer: str, quote: str | None
    ) -> dict[str, Any]:
        refused = answer.startswith("I don't")
        correct = refused if expected is None else (not refused and "7:00" in answer)
        return {
            "llm": "qwen2.5-coder-0.5b",
            "surface": "answer",
            "split": "test",
            "set": "town-notices",
            "expected": expected,
            "answerable_probability": p,
            "refusal_probability": refusal,
            "answer": answer,
            "correct": correct,
            "quote": quote,
        }

    bins = "Put bins out by 7:00 on collection day."
    no = "I don't have enough information to answer that question."
    rows = [
        row(["7:00"], 0.9, 0.95, no, bins),  # refused, quoted: right
        row(["7:00"], 0.9, 0.95, no, "The library is closed on Mondays."),  # wrong line
        row(["7:00"], 0.9, 0.01, "By 7:00.", bins),  # answered right by the model
        row(None, 0.9, 0.95, no, "Items are kept for 28 days."),  # an answer: not declined
        row(None, 0.9, 0.95, no, None),  # nothing to quote: declined
        row(None, 0.1, 0.01, "£45", bins),  # below the threshold: declined
    ]
    assert served(rows, 0.5, 0.3, quotes=True) == "67% / 67%"
    assert served(rows, 0.5, 0.3, quotes=False) == "100% / 33%"
    assert served(rows, 0.95, 0.3, quotes=True) == "100% / 0%"

    from flask_app.rag.answerability import probe_path

    shipped = json.loads(probe_path("qwen2.5-coder-0.5b").read_text())
    settings = {"probe_fitted_threshold": shipped["threshold"], "quote_refusals": True}
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"settings": {"qwen2.5-coder-0.5b": settings}, "answers": rows}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.argv", ["probe_test_frontier.py", str(run)])
        probe_test_frontier.main()
        printed = capsys.readouterr().out
        assert "| 80% | qwen2.5-coder-0.5b |" in printed
        run.write_text(
            json.dumps(
                {
                    "settings": {"qwen2.5-coder-0.5b": settings},
                    "answers": [{k: v for k, v in r.items() if k != "quote"} for r in rows],
                }
            )
        )
        with pytest.raises(SystemExit, match="did not record the lines"):
            probe_test_frontier.main()


def test_rows_are_labelled_as_a_server_quoting_refusals_answers_them() -> None:
    """probe_fit.with_quotes: a row whose first token passed the refusal gate
    is answered by its best line (right when that holds the fact; refused
    without one); a row below the gate keeps its own answer's labels."""
    from benches import probe_fit

    def row(refusal: float, quote: str | None, quote_correct: bool, **own: Any) -> dict[str, Any]:
        return {
            "refusal_probability": refusal,
            "quote": quote,
            "quote_correct": quote_correct,
            **own,
        }

    meta = [
        row(0.9, "Bins go out by 7:00.", True, refused=True, correct=False),
        row(0.9, "The pool opens at 9.", False, refused=True, correct=False),
        row(0.9, None, False, refused=False, correct=True),
        row(0.1, "Bins go out by 7:00.", True, refused=True, correct=False),
        row(0.1, "Bins go out by 7:00.", True, refused=False, correct=False),
    ]
    rows = probe_fit.with_quotes(probe_fit.Rows(meta, np.zeros((5, 2))), 0.3)
    labels = [(r["refused"], r["correct"]) for r in rows.meta]
    assert labels == [(False, True), (False, False), (True, False), (True, False), (False, False)]
    assert meta[0]["refused"] is True  # the rows given are left as they were


def test_rows_are_labelled_as_a_server_quoting_yes_or_no_questions_answers_them() -> None:
    """probe_fit.with_quotes with `yes_no`: a yes-or-no question is answered
    by its best line whatever its first token said; other questions keep
    their labels unless refusals are quoted too."""
    from benches import probe_fit

    def row(question: str, refusal: float, quote: str | None, correct: bool) -> dict[str, Any]:
        return {
            "question": question,
            "refusal_probability": refusal,
            "quote": quote,
            "quote_correct": quote is not None and "closed" in quote,
            "refused": refusal > 0.3,
            "correct": correct,
        }

    monday = "The library is closed on Mondays."
    meta = [
        row("Can I go to the library on a Monday?", 0.1, monday, False),  # said yes: wrong
        row("Is the library open on Mondays?", 0.9, None, False),  # nothing to quote
        row("When is the library closed?", 0.1, monday, True),  # not yes-or-no
        row("When does the library open?", 0.9, "Opening hours.", False),  # refusal
    ]
    rows = probe_fit.Rows(meta, np.zeros((4, 2)))
    labels = [
        (r["refused"], r["correct"]) for r in probe_fit.with_quotes(rows, 0.3, False, True).meta
    ]
    assert labels == [(False, True), (True, False), (False, True), (True, False)]
    both = probe_fit.with_quotes(rows, 0.3, True, True).meta
    assert [(r["refused"], r["correct"]) for r in both][3] == (False, False)
    choice = probe_fit.Choice(13, 0.01, 0.0, (), 0.8, quote_yes_no=True)
    assert probe_fit.as_served(rows, choice, 0.3).meta[0]["correct"] is True
    assert probe_fit.as_served(rows, replace(choice, quote_yes_no=False), 0.3) is rows


def test_dev_outcomes_per_set_are_each_sets_own() -> None:
    """probe_fit.outcome_per_set: each set's declined and right shares from
    its own asked rows only (the dev column of the per-set table)."""
    from benches import probe_fit

    def row(name: str, answerable: bool, correct: bool) -> dict[str, Any]:
        return {
            "set": name,
            "kind": "asked",
            "answerable": answerable,
            "correct": correct,
            "refused": False,
        }

    meta = [
        row("a", True, True),  # passes: right
        row("a", True, True),  # declined: not right
        row("a", False, False),  # declined
        row("b", True, False),  # passes, wrong
        row("b", False, False),  # passes: not declined
        {**row("b", False, False), "kind": "few"},  # not an asked row: not counted
    ]
    p = np.array([0.9, 0.1, 0.1, 0.9, 0.9, 0.0])
    rows = probe_fit.Rows(meta, np.zeros((len(meta), 2)))
    per_set = probe_fit.outcome_per_set(rows, p, 0.5)
    assert (per_set["a"].refusals, per_set["a"].accuracy) == (1.0, 0.5)
    assert (per_set["b"].refusals, per_set["b"].accuracy) == (0.0, 0.0)


def test_a_cut_row_keeps_its_passage_but_the_sentences_holding_the_fact() -> None:
    """benches/probe_cut_rows.py: the on-topic negative keeps what the
    passage says about its subject and loses every sentence with the fact."""
    from benches.probe_cut_rows import without_fact

    sheet = (
        "Pulse P5 earbuds. Up to 9 hours per charge, and 30 hours in total with the case. "
        "The case charges wirelessly on any Qi pad. Rated IPX7."
    )
    assert without_fact(sheet, ["30 hours"]) == (
        "Pulse P5 earbuds. The case charges wirelessly on any Qi pad. Rated IPX7."
    )
    assert without_fact("Rated IPX7.", ["IPX7"]) == ""


def test_several_layers_are_read_as_their_mean_or_side_by_side_in_order() -> None:
    """benches/probe_layers.py: the layers are found by their number among
    the collected ones (-1, the final state, first), not by position."""
    from benches.probe_layers import features

    collected = [-1, 0, 1, 2]
    states = np.array([[[9.0, 9.0], [1.0, 2.0], [3.0, 4.0], [5.0, 8.0]]])
    assert features(states, collected, "mean", (0, 2)).tolist() == [[3.0, 5.0]]
    assert features(states, collected, "concatenation", (2, 0)).tolist() == [[5.0, 8.0, 1.0, 2.0]]


def test_the_way_of_quoting_is_the_one_dev_answers_most_with_ties_to_quoting_less() -> None:
    from benches import probe_fit

    def ways(*rights: float) -> dict[tuple[bool, bool], probe_fit.Outcome]:
        return {
            way: probe_fit.Outcome(0.5, 0.8, right)
            for way, right in zip(probe_fit.QUOTINGS, rights, strict=True)
        }

    assert probe_fit.chosen_quoting(ways(0.59, 0.56, 0.66, 0.61)) == (False, True)
    assert probe_fit.chosen_quoting(ways(0.52, 0.58, 0.52, 0.58)) == (True, False)
    assert probe_fit.chosen_quoting(ways(0.50, 0.50, 0.50, 0.50)) == (False, False)
    assert probe_fit.chosen_quoting(ways(0.52, 0.577, 0.52, 0.583)) == (True, True)
