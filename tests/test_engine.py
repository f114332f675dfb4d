"""Engine collections surface with the scripted fake LLM: spec cases E1-E19,
access control (asserted on the exact prompt the model receives), spans on
multi-byte text, every file format, ingestion across a restart."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, current_app
from flask.testing import FlaskClient

from flask_app.api.engine import answer as engine_answer
from flask_app.api.http.extensions import collections_of
from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.settings import Settings
from tests import stores

DEPLOY = (
    "# Deploys\n\nDeploys are frozen on Fridays. Hotfixes need SRE approval.\n\n"
    "# Rollbacks\n\nA rollback takes about ten minutes."
)
STAGING = "# Staging\n\nThe staging cluster is rebuilt every Monday night."
SECRET = "The vault master password rotates every Tuesday."


def build(
    tmp_path: Path, reply: Any = "Deploys are frozen on Fridays.", **options: Any
) -> tuple[Flask, ScriptedBackend]:
    settings = Settings.load({"data_dir": tmp_path / "data", **options}, {})
    backend = ScriptedBackend(reply)
    services = stores.services(settings, LLM(backend, max_waiters=4, timeout=30), HashEmbedder())
    return create_app(settings, services), backend


def idle(app: Flask) -> None:
    with app.app_context():
        assert collections_of(current_app).ingestor.wait_idle(20)


def upload(
    client: FlaskClient, coll: str, path: str, text: str | None = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "path": path,
        "content_type": extra.pop("content_type", "text/markdown"),
    }
    if text is not None:
        body["text"] = text
    body.update(extra)
    r = client.post(f"/namespaces/ops/collections/{coll}/files", json=body)
    assert r.status_code == 202, r.get_json()
    got: dict[str, Any] = r.get_json()
    return got


@pytest.fixture
def fixture_f(tmp_path: Path) -> tuple[Flask, FlaskClient, ScriptedBackend]:
    """Spec fixture F: runbooks (open, two ready files), secure (enforced),
    blank (empty)."""
    app, backend = build(tmp_path)
    client = app.test_client()
    assert client.put("/namespaces/ops").status_code == 201
    for name, access in (("runbooks", "open"), ("secure", "enforced"), ("blank", "open")):
        r = client.put(f"/namespaces/ops/collections/{name}", json={"access_control": access})
        assert r.status_code == 201
    upload(client, "runbooks", "runbooks/deploy.md", DEPLOY, metadata={"environment": "production"})
    upload(client, "runbooks", "runbooks/staging.md", STAGING, metadata={"environment": "staging"})
    upload(client, "secure", "vault.md", SECRET, principals=["group:sre"])
    idle(app)
    return app, client, backend


def ask(client: FlaskClient, body: dict[str, Any], coll: str = "runbooks") -> Any:
    return client.post(f"/namespaces/ops/collections/{coll}:answer", json=body)


def error_of(r: Any) -> dict[str, Any]:
    body = r.get_json()
    assert set(body) == {"request_id", "error"} and r.headers["X-Request-Id"] == body["request_id"]
    assert set(body["error"]) == {"code", "message", "retryable", "details"}
    err: dict[str, Any] = body["error"]
    return err


def test_e1_minimal_answer(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, _ = fixture_f
    r = ask(client, {"query": "When are deploys frozen?"})
    body = r.get_json()
    assert r.status_code == 200 and r.headers["X-Request-Id"] == body["request_id"]
    assert body["request_id"].startswith("req_") and len(body["request_id"]) == 30
    assert body["effort"] == "medium" and body["image_description"] is None
    assert body["usage"] == {"credits": 1}
    assert "[[SRC:0001]]" in body["answer"]
    sources = body["sources"]
    refs = {s["ref"] for s in sources}
    import re

    for marker in re.findall(r"\[\[(SRC:\d{4})\]\]", body["answer"]):
        assert marker in refs
    cited = [s["cited"] for s in sources]
    assert cited[0] and cited == sorted(cited, reverse=True)  # cited first
    for s in sources:
        assert s["span"]["unit"] == "chars" and 0 <= s["span"]["start"] < s["span"]["end"]
        assert 0 <= s["score"] <= 1
    first = sources[0]
    assert first["path"] == "runbooks/deploy.md" and first["content_type"] == "text/markdown"
    spans = client.post(
        "/namespaces/ops/collections/runbooks:readSpans", json={"spans": [first["span"]]}
    ).get_json()["spans"]
    # the cited span is the sentence the answer rests on, not its whole paragraph
    assert spans[0]["text"] == "Deploys are frozen on Fridays."


def test_a_likely_refusal_is_the_collections_own_decline(
    fixture_f: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    _, client, backend = fixture_f
    backend.refusal_probability = 0.9  # the model is about to decline
    body = ask(client, {"query": "Are deploys frozen on Fridays?"}).get_json()
    assert body["answer"] == engine_answer.NOT_FOUND_ANSWER
    assert not any(s["cited"] for s in body["sources"])


def test_e2_e3_sources_modes(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, _ = fixture_f
    every = ask(client, {"query": "When are deploys frozen?"}).get_json()
    cited = ask(client, {"query": "When are deploys frozen?", "sources": "cited"}).get_json()
    assert cited["answer"] == every["answer"]
    assert cited["sources"] and all(s["cited"] for s in cited["sources"])
    none = ask(client, {"query": "When are deploys frozen?", "sources": "none"}).get_json()
    assert none["sources"] == [] and "[[SRC:" not in none["answer"]
    assert none["answer"] == "Deploys are frozen on Fridays."


def test_invented_markers_are_removed(tmp_path: Path) -> None:
    app, _ = build(tmp_path, "Frozen on Fridays [[SRC:0009]] [SRC:1] [[SRC:0001]].")
    client = app.test_client()
    client.put("/namespaces/ops")
    client.put("/namespaces/ops/collections/runbooks")
    upload(client, "runbooks", "d.md", DEPLOY)
    idle(app)
    body = ask(client, {"query": "When are deploys frozen?"}).get_json()
    assert body["answer"] == "Frozen on Fridays [[SRC:0001]]."
    assert [s["ref"] for s in body["sources"] if s["cited"]] == ["SRC:0001"]


def test_e4_high_effort(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, _ = fixture_f
    body = ask(client, {"query": "When are deploys frozen?", "effort": "high"}).get_json()
    assert body["effort"] == "high" and body["usage"] == {"credits": 4}


def test_e5_filter(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, backend = fixture_f
    query = "When is the staging cluster rebuilt?"
    body = ask(client, {"query": query, "filter": "metadata.environment = staging"}).get_json()
    assert body["sources"] and all(s["path"] == "runbooks/staging.md" for s in body["sources"])
    assert "frozen on Fridays" not in backend.prompts[-1]
    asked = len(backend.prompts)
    body = ask(client, {"query": query, "filter": "metadata.environment = production"}).get_json()
    assert all(s["path"] == "runbooks/deploy.md" for s in body["sources"])
    assert all("staging cluster is" not in p for p in backend.prompts[asked:])


def test_e6_bad_filter(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, _ = fixture_f
    r = ask(client, {"query": "q", "filter": "metadata.environment = "})
    err = error_of(r)
    assert r.status_code == 400 and err["code"] == "invalid_request"
    assert err["message"].startswith("filter: ") and err["details"]["field"] == "filter"


def test_e7_history_limits(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, _ = fixture_f
    turn = {"role": "user", "content": "hi"}
    r = ask(client, {"query": "q", "history": [turn] * 33})
    assert error_of(r)["message"] == "history must contain at most 32 messages."
    r = ask(client, {"query": "q", "history": [{"role": "user", "content": "a" * 32001}]})
    assert error_of(r)["details"]["field"] == "history[0].content"
    full = [{"role": ("user", "assistant")[i % 2], "content": "a" * 32000} for i in range(32)]
    assert ask(client, {"query": "When are deploys frozen?", "history": full}).status_code == 200


def test_e8_e9_e19_validation(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, _ = fixture_f
    assert ask(client, {"query": "q", "instructions": "x" * 8001}).status_code == 400
    assert (
        ask(client, {"query": "When are deploys frozen?", "instructions": "x" * 8000}).status_code
        == 200
    )
    r = ask(client, {"query": "q", "effort": "low"})
    assert error_of(r)["message"] == "effort must be one of: medium, high"
    r = ask(client, {"query": "q", "source": "all"})
    assert error_of(r)["message"] == "Unknown field: source"
    assert error_of(ask(client, {"query": " "}))["message"] == "query is required."
    r = client.post(
        "/namespaces/ops/collections/runbooks:answer", data=b"{", content_type="application/json"
    )
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_request"


def test_instructions_replace_only_the_style(
    fixture_f: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    _, client, backend = fixture_f
    ask(client, {"query": "When are deploys frozen?", "instructions": "Answer in French."})
    system = backend.prompts[-1].split("<|user|>")[0]
    assert "Answer in French." in system and "one short sentence" not in system
    assert "using only the text" in system and "reply exactly" in system


def test_e10_images(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, _ = fixture_f
    png = base64.b64encode(b"\x89PNG" + b"\0" * 10_000).decode()
    r = ask(
        client, {"query": "What is shown?", "query_image": {"media_type": "image/png", "data": png}}
    )
    assert r.status_code == 400 and "vision model" in error_of(r)["message"]
    big = base64.b64encode(b"\0" * 4_194_305).decode()
    r = ask(client, {"query": "q", "query_image": {"media_type": "image/png", "data": big}})
    assert error_of(r)["message"] == "query_image.data must decode to at most 4194304 bytes."
    r = ask(client, {"query": "q", "query_image": {"media_type": "image/bmp", "data": png}})
    assert error_of(r)["details"]["field"] == "query_image.media_type"
    for data in ("not base64!", "AAA", "é" * 4, 12):
        r = ask(client, {"query": "q", "query_image": {"media_type": "image/png", "data": data}})
        assert error_of(r)["message"] == "query_image.data must be valid base64.", data
    r = client.post(
        "/namespaces/ops/collections/runbooks:answer",
        data=b"x" * 6_291_457,
        content_type="application/json",
    )
    err = error_of(r)
    assert r.status_code == 413 and err["code"] == "request_too_large" and not err["retryable"]


def test_e11_e12_collection_states(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    client = app.test_client()
    client.put("/namespaces/ops")
    for name in ("blank", "fresh", "broken"):
        client.put(f"/namespaces/ops/collections/{name}")
    r = ask(client, {"query": "q"}, "blank")
    assert r.status_code == 409 and error_of(r)["code"] == "collection_empty"
    assert not error_of(r)["retryable"]
    upload(
        client,
        "broken",
        "x.pdf",
        content_type="application/pdf",
        data=base64.b64encode(b"not a pdf").decode(),
    )
    idle(app)
    with app.app_context():  # a file still processing
        collections_of(current_app).catalog.add_file(
            "ops", "fresh", "f.md", "text/markdown", b"text", {}, []
        )
    r = ask(client, {"query": "q"}, "fresh")
    assert r.status_code == 409 and error_of(r)["code"] == "collection_not_ready"
    assert error_of(r)["retryable"] and r.headers["Retry-After"]
    r = ask(client, {"query": "q"}, "broken")
    assert error_of(r)["code"] == "collection_not_ready" and not error_of(r)["retryable"]
    files = client.get("/namespaces/ops/collections/broken/files").get_json()["files"]
    assert files[0]["status"] == "failed" and "PDF" in files[0]["error"]["message"]


def test_e13_access_control(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, backend = fixture_f
    r = ask(client, {"query": "When does the vault password rotate?"}, "secure")
    assert r.status_code == 400 and "principals is required" in error_of(r)["message"]
    asked = len(backend.prompts)
    body = ask(
        client,
        {"query": "When does the vault password rotate?", "principals": ["group:other"]},
        "secure",
    ).get_json()
    assert not any(s["cited"] for s in body["sources"]) and "Tuesday" not in body["answer"]
    assert all("vault" not in p for p in backend.prompts[asked:])  # never reached the model
    body = ask(
        client,
        {"query": "When does the vault password rotate?", "principals": ["group:sre"]},
        "secure",
    ).get_json()
    assert "vault master password" in backend.prompts[-1]
    assert body["sources"][0]["path"] == "vault.md"
    span = body["sources"][0]["span"]
    r = client.post(
        "/namespaces/ops/collections/secure:readSpans",
        json={"spans": [span], "principals": ["group:other"]},
    )
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    listed = client.get("/namespaces/ops/collections/secure/files?principals=group:other")
    assert listed.get_json()["files"] == []
    listed = client.get("/namespaces/ops/collections/secure/files?principals=group:sre")
    assert [f["path"] for f in listed.get_json()["files"]] == ["vault.md"]


def test_e14_time_limit(
    fixture_f: tuple[Flask, FlaskClient, ScriptedBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client, backend = fixture_f
    monkeypatch.setattr(engine_answer, "TIME_LIMIT_S", 0.5)
    backend.token_delay = 0.3
    start = time.monotonic()
    r = ask(client, {"query": "When are deploys frozen?"})
    err = error_of(r)
    assert r.status_code == 503 and err["code"] == "temporarily_unavailable" and err["retryable"]
    assert "usage" not in r.get_json() and time.monotonic() - start < 5


def test_e15_spans_count_code_points(tmp_path: Path) -> None:
    app, _ = build(tmp_path, "It is the Kraken.")
    client = app.test_client()
    client.put("/namespaces/ops")
    client.put("/namespaces/ops/collections/runbooks")
    text = "🐙🐙 日本語のテキスト。\n\nThe mascot of the team is the Kraken. 🎉 Ünïcödé."
    upload(client, "runbooks", "m.md", text)
    idle(app)
    body = ask(client, {"query": "What is the mascot of the team?"}).get_json()
    span = body["sources"][0]["span"]
    got = client.post(
        "/namespaces/ops/collections/runbooks:readSpans", json={"spans": [span], "context_chars": 3}
    ).get_json()["spans"][0]
    assert got["text"] == text[span["start"] : span["end"]]
    assert "mascot of the team is the Kraken" in got["text"]
    assert got["context_before"] == text[max(0, span["start"] - 3) : span["start"]]
    r = client.post(
        "/namespaces/ops/collections/runbooks:readSpans",
        json={"spans": [{**span, "end": len(text) + 1}]},
    )
    assert r.status_code == 400 and error_of(r)["details"]["field"] == "spans[0]"


def test_e16_not_found_and_unauthenticated(tmp_path: Path) -> None:
    app, _ = build(tmp_path, api_keys="k1")
    client = app.test_client()
    r = client.post("/namespaces/ops/collections/nope:answer", json={"query": "q"})
    assert r.status_code == 401 and error_of(r)["code"] == "unauthenticated"
    auth = {"Authorization": "Bearer k1"}
    client.put("/namespaces/ops", headers=auth)
    r = client.post("/namespaces/ops/collections/nope:answer", json={"query": "q"}, headers=auth)
    assert r.status_code == 404 and error_of(r)["message"] == "Not found: collection ops/nope"
    assert client.get("/info").status_code == 200  # open without a key


def test_scoped_keys_reach_only_their_namespaces(tmp_path: Path) -> None:
    app, backend = build(tmp_path, api_keys="admin,ops-key:ops+shared")
    client = app.test_client()
    admin = {"Authorization": "Bearer admin"}
    ops = {"Authorization": "Bearer ops-key"}
    for ns in ("ops", "hr"):
        assert client.put(f"/namespaces/{ns}", headers=admin).status_code == 201
        client.put(f"/namespaces/{ns}/collections/docs", headers=admin)
        r = client.post(
            f"/namespaces/{ns}/collections/docs/files",
            json={"path": "a.md", "content_type": "text/markdown", "text": f"{ns} secret: 4471."},
            headers=admin,
        )
        assert r.status_code == 202
    idle(app)
    assert client.get("/namespaces/ops/collections/docs", headers=ops).status_code == 200
    r = client.post("/namespaces/ops/collections/docs:answer", json={"query": "x"}, headers=ops)
    assert r.status_code == 200
    prompts = len(backend.prompts)
    for method, path, body in [
        ("GET", "/namespaces/hr", None),
        ("GET", "/namespaces/hr/collections/docs/files", None),
        ("POST", "/namespaces/hr/collections/docs:answer", {"query": "What is the secret?"}),
        (
            "POST",
            "/namespaces/hr/collections/docs:readSpans",
            {"spans": [{"file_id": "f", "start": 0, "end": 1}]},
        ),
        ("DELETE", "/namespaces/hr/collections/docs", None),
        ("PUT", "/namespaces/new-one", None),
        ("GET", "/namespaces/no-such-ns", None),  # existence is not revealed either
    ]:
        r = client.open(path, method=method, json=body, headers=ops)
        assert r.status_code == 403, (path, r.status_code)
        assert error_of(r) == {
            "code": "permission_denied",
            "message": "The API key cannot access this namespace.",
            "retryable": False,
            "details": {},
        }
        assert "4471" not in r.get_data(as_text=True)
    # validation comes before the resource check (spec §3 order)
    r = client.post("/namespaces/hr/collections/docs:answer", json={"query": ""}, headers=ops)
    assert r.status_code == 400
    assert len(backend.prompts) == prompts  # nothing about hr reached the model
    assert client.get("/namespaces/hr", headers=admin).status_code == 200
    # the other surfaces are shared by full keys only
    for path in ("/export", "/v1/models", "/metrics"):
        assert client.get(path, headers=ops).status_code == 403, path
        assert client.get(path, headers=admin).status_code == 200, path
    r = client.post("/ai/prediction/rag/qwen2.5", json={"batch": []}, headers=ops)
    assert r.status_code == 403
    denied = client.get("/v1/models", headers=ops).get_json()["error"]
    assert denied["code"] == "permission_denied" and "scoped" in denied["message"]
    assert client.get("/health").status_code == 200


def test_scoped_key_syntax_is_validated(tmp_path: Path) -> None:
    from flask_app.settings import SettingsError

    for bad in ("k:", "k:Bad_NS", ":ops"):
        with pytest.raises(SettingsError, match="scoped api key"):
            Settings.load({"data_dir": tmp_path, "api_keys": bad}, {})


def _frames(raw: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_answer_streams_deltas_then_the_body(
    fixture_f: tuple[Flask, FlaskClient, ScriptedBackend],
) -> None:
    _, client, _ = fixture_f
    body = {"query": "When are deploys frozen?"}
    plain = ask(client, body).get_json()
    r = client.post(
        "/namespaces/ops/collections/runbooks:answer",
        json=body,
        headers={"Accept": "text/event-stream"},
    )
    assert r.status_code == 200 and r.mimetype == "text/event-stream"
    frames = _frames(r.get_data(as_text=True))
    kinds = [kind for kind, _ in frames]
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"delta"} and len(kinds) > 3
    # deltas are the model's raw text; `done` is the checked body
    assert "".join(d["text"] for k, d in frames if k == "delta") == (
        "Deploys are frozen on Fridays."
    )
    done = frames[-1][1]
    assert done["answer"] == plain["answer"] == "Deploys are frozen on Fridays [[SRC:0001]]."
    assert done["sources"] == plain["sources"]
    assert done["request_id"] == r.headers["X-Request-Id"]


def test_e17_info(lw_free_client: FlaskClient) -> None:
    info = lw_free_client.get("/info").get_json()
    assert info["doc_version"] == "0.1.0-preview"
    assert info["answer"]["efforts"] == ["medium", "high"]
    assert info["answer"]["limits"]["max_request_bytes"] == 6291456


@pytest.fixture
def lw_free_client(tmp_path: Path) -> FlaskClient:
    app, _ = build(tmp_path)
    return app.test_client()


def test_e18_percent_encoded_colon(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, _ = fixture_f
    r = client.post(
        "/namespaces/ops/collections/runbooks%3Aanswer", json={"query": "When are deploys frozen?"}
    )
    assert r.status_code == 200 and "[[SRC:0001]]" in r.get_json()["answer"]


def test_resources_lifecycle(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    client = app.test_client()
    assert client.put("/namespaces/Bad_Name").status_code == 400
    assert client.put("/namespaces/ops").status_code == 201
    assert client.put("/namespaces/ops").status_code == 200  # idempotent
    for i in range(3):
        client.put(f"/namespaces/ops/collections/c{i}", json={"description": f"d{i}"})
    page = client.get("/namespaces/ops/collections?page_size=2").get_json()
    assert [c["name"] for c in page["collections"]] == ["c0", "c1"]
    rest = client.get(
        f"/namespaces/ops/collections?page_size=2&page_token={page['next_page_token']}"
    ).get_json()
    assert [c["name"] for c in rest["collections"]] == ["c2"] and rest["next_page_token"] is None
    r = client.delete("/namespaces/ops")
    assert r.status_code == 409 and error_of(r)["code"] == "namespace_not_empty"
    first = upload(client, "c0", "a/b.md", "Alpha text here.")
    second = upload(client, "c0", "a/b.md", "Beta text here.")  # same path: replaced
    idle(app)
    files = client.get("/namespaces/ops/collections/c0/files").get_json()["files"]
    assert [f["file_id"] for f in files] == [second["file_id"]]
    assert client.get(f"/namespaces/ops/collections/c0/files/{first['file_id']}").status_code == 404
    store = app.extensions["edgerag"]["services"].store
    assert store.collection("ops", "c0").matching_ids({"file_id": first["file_id"]}) == []
    assert (
        client.delete(f"/namespaces/ops/collections/c0/files/{second['file_id']}").status_code
        == 204
    )
    assert store.collection("ops", "c0").matching_ids({"file_id": second["file_id"]}) == []
    for i in range(3):
        assert client.delete(f"/namespaces/ops/collections/c{i}").status_code == 204
    assert client.delete("/namespaces/ops").status_code == 204
    assert client.get("/namespaces/ops").status_code == 404


def _pdf(pages: list[str]) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 10, text)
    return bytes(pdf.output())


@pytest.mark.parametrize(
    ("content_type", "payload", "expected"),
    [
        ("text/plain", "Plain words about the Kraken.", "Plain words about the Kraken."),
        (
            "text/markdown",
            "# Title\n\nMarkdown *about* the Kraken.",
            "# Title\n\nMarkdown *about* the Kraken.",
        ),
        (
            "text/html",
            "<html><head><script>x()</script></head>"
            "<body><p>HTML about the <b>Kraken</b>.</p></body></html>",
            "HTML about the Kraken.",
        ),
        ("text/csv", "name,role\nKraken,mascot\n", "name,role\nKraken,mascot\n"),
        ("application/json", '{"mascot": "Kraken"}', '{"mascot": "Kraken"}'),
        ("application/pdf", None, "Page one about the Kraken.\fPage two."),
    ],
)
def test_each_format_is_extracted(
    tmp_path: Path, content_type: str, payload: str | None, expected: str
) -> None:
    app, _ = build(tmp_path)
    client = app.test_client()
    client.put("/namespaces/ops")
    client.put("/namespaces/ops/collections/docs")
    if payload is None:
        data = base64.b64encode(_pdf(["Page one about the Kraken.", "Page two."])).decode()
        record = upload(client, "docs", "f", content_type=content_type, data=data)
    else:
        record = upload(client, "docs", "f", "\ufeff" + payload, content_type=content_type)
    idle(app)
    with app.app_context():
        text = collections_of(current_app).catalog.text(record["file_id"])
    assert text is not None and text.strip() == expected.strip()
    got = client.get(f"/namespaces/ops/collections/docs/files/{record['file_id']}").get_json()
    assert got["status"] == "ready" and got["char_count"] == len(text)


def test_ingestion_resumes_after_a_restart(tmp_path: Path) -> None:
    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    services = stores.services(settings, None, HashEmbedder())
    app = create_app(settings, services)
    with app.app_context():  # accepted, never ingested: the process "died"
        record, _ = collections_of(current_app).catalog.add_file(
            "ops", "runbooks", "d.md", "text/markdown", DEPLOY.encode(), {}, []
        )
        collections_of(current_app).catalog.put_namespace("ops")
        collections_of(current_app).catalog.put_collection("ops", "runbooks", None, None)
        collections_of(current_app).catalog.close()
    services.store.close()
    again = create_app(settings, stores.services(settings, None, HashEmbedder()))
    idle(again)
    got = (
        again.test_client()
        .get(f"/namespaces/ops/collections/runbooks/files/{record.file_id}")
        .get_json()
    )
    assert got["status"] == "ready" and got["char_count"] == len(DEPLOY)


def test_upload_validation(fixture_f: tuple[Flask, FlaskClient, ScriptedBackend]) -> None:
    _, client, _ = fixture_f
    url = "/namespaces/ops/collections/runbooks/files"
    cases = [
        ({"path": "../x", "content_type": "text/plain", "text": "t"}, "path"),
        ({"path": "x", "content_type": "image/png", "text": "t"}, "content_type"),
        ({"path": "x", "content_type": "text/plain"}, "text"),
        ({"path": "x", "content_type": "application/pdf", "text": "t"}, "text"),
        (
            {"path": "x", "content_type": "text/plain", "text": "t", "metadata": {"bad key": 1}},
            "metadata.bad key",
        ),
        ({"path": "x", "content_type": "text/plain", "text": "t", "extra": 1}, "extra"),
        ({"path": "x", "content_type": "application/pdf", "data": "not base64!"}, "data"),
        # non-ASCII in base64 data (found by the fuzz suite: it was a 500)
        ({"path": "x", "content_type": "application/pdf", "data": "\U000d71b6B\x0f,"}, "data"),
        ({"path": "x", "content_type": "text/plain", "data": "é"}, "data"),
    ]
    for body, field in cases:
        r = client.post(url, json=body)
        assert r.status_code == 400 and error_of(r)["details"]["field"] == field, body
    r = client.post(
        "/namespaces/ops/collections/secure/files",
        json={"path": "x", "content_type": "text/plain", "text": "t"},
    )
    assert "principals is required" in error_of(r)["message"]
    assert client.get(url).get_json()["files"]
