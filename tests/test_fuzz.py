"""Schema fuzzing of every route: requests generated from the request models'
JSON schemas (valid ones, ones with a field replaced by arbitrary JSON, and
arbitrary bodies and content types), and `/upload`'s multipart bodies (drawn
.npy files, ids and JSON Lines, parts missing or garbled). No response may be a 5xx, every error
is JSON, and a rejected request never changes the store.

CI runs EDGERAG_FUZZ_EXAMPLES (default 1,500) requests; the documented figure
comes from `EDGERAG_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest tests/test_fuzz.py`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from flask_app.api.lucidworks.schemas import RagRequest, TextRequest
from flask_app.api.moorcheh.schemas import Answer, DeleteItems, Search, Upload
from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.services import assemble
from flask_app.settings import Settings
from flask_app.store import Store

EXAMPLES = int(os.environ.get("EDGERAG_FUZZ_EXAMPLES", "1500"))
DIM = 128  # the smallest dimension moorcheh-edge accepts

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
vectors = st.lists(
    st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=DIM, max_size=DIM
)


def _upload_schema() -> dict[str, Any]:
    """The upload model's schema plus the `vector` the route takes out before validating."""
    schema = Upload.model_json_schema()
    item = schema["$defs"]["UploadItem"]
    item["properties"]["vector"] = {
        "type": "array",
        "items": {"type": "number"},
        "minItems": DIM,
        "maxItems": DIM,
    }
    schema["properties"]["items"]["maxItems"] = 5
    return schema


def _bounded(schema: dict[str, Any]) -> dict[str, Any]:
    schema = dict(schema)
    for spec in schema.get("properties", {}).values():
        if spec.get("type") == "array":
            spec.setdefault("maxItems", 5)
    return schema


def _lucidworks(model: type[RagRequest] | type[TextRequest]) -> dict[str, Any]:
    """A Lucidworks request schema with small batches and few documents."""
    schema = model.model_json_schema()
    schema["properties"]["batch"]["maxItems"] = 3
    item = schema["$defs"].get("RagItem")
    if item is not None:
        item["properties"]["documents"]["maxItems"] = 3
    return schema


# The Engine surface validates by hand (exact messages); these schemas only
# steer the generator towards bodies that get past the first checks.
_TEXT = {"type": "string", "maxLength": 40}
ENGINE_ANSWER = {
    "type": "object",
    "properties": {
        "query": _TEXT,
        "effort": {"enum": ["medium", "high", "low"]},
        "sources": {"enum": ["all", "cited", "none", "x"]},
        "instructions": _TEXT,
        "filter": _TEXT,
        "principals": {"type": "array", "items": _TEXT, "maxItems": 3},
        "history": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"role": {"enum": ["user", "assistant", "x"]}, "content": _TEXT},
            },
        },
    },
}
ENGINE_SPANS = {
    "type": "object",
    "properties": {
        "spans": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "file_id": _TEXT,
                    "unit": {"enum": ["chars", "bytes"]},
                    "start": {"type": "integer"},
                    "end": {"type": "integer"},
                },
            },
        },
        "context_chars": {"type": "integer"},
    },
}
ENGINE_FILE = {
    "type": "object",
    "properties": {
        "path": _TEXT,
        "content_type": {"enum": ["text/plain", "application/pdf", "text/html", "x/y"]},
        "text": _TEXT,
        "data": _TEXT,
        "metadata": {"type": "object", "maxProperties": 3},
    },
}

BODY_ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/upload", _upload_schema()),
    ("POST", "/search", _bounded(Search.model_json_schema())),
    ("POST", "/answer", _bounded(Answer.model_json_schema())),
    ("POST", "/answer/stream", _bounded(Answer.model_json_schema())),
    ("DELETE", "/items", _bounded(DeleteItems.model_json_schema())),
    ("DELETE", "/delete", _bounded(DeleteItems.model_json_schema())),
    ("POST", "/ai/prediction/rag/mistral", _lucidworks(RagRequest)),
    ("POST", "/ai/async-prediction/rag/mistral", _lucidworks(RagRequest)),
    ("POST", "/ai/prediction/standalone-query-rewriter/mistral", _lucidworks(RagRequest)),
    ("POST", "/ai/prediction/embedding/e5-small-v2", _lucidworks(TextRequest)),
    ("POST", "/ai/tokenization/e5-small-v2", _lucidworks(TextRequest)),
    ("POST", "/namespaces/fz/collections/docs:answer", ENGINE_ANSWER),
    ("POST", "/namespaces/fz/collections/docs:readSpans", ENGINE_SPANS),
    ("POST", "/namespaces/fz/collections/docs/files", ENGINE_FILE),
    ("PUT", "/namespaces/fz/collections/docs", {"type": "object"}),
]


@st.composite
def body_requests(draw: st.DrawFn) -> tuple[str, str, bytes, str]:
    method, path, schema = draw(st.sampled_from(BODY_ROUTES))
    body: Any = draw(from_schema(schema))
    shape = draw(st.sampled_from(["valid", "one field replaced", "any JSON", "bytes"]))
    if shape == "one field replaced" and isinstance(body, dict) and body:
        key = draw(st.sampled_from(sorted(body)))
        body[key] = draw(json_values)
    elif shape == "any JSON":
        body = draw(json_values)
    if shape == "bytes":
        raw = draw(st.binary(max_size=64))
        content_type = draw(st.sampled_from(["application/json", "text/plain", ""]))
    else:
        raw = json.dumps(body).encode()  # stdlib: big ints and NaN go through as sent
        content_type = "application/json"
    return method, path, raw, content_type


@st.composite
def npy_files(draw: st.DrawFn) -> bytes:
    """A .npy of a drawn shape and dtype (mostly float rows), or bytes around one."""
    import io

    import numpy as np

    rows = draw(st.integers(0, 3))
    dim = draw(st.sampled_from([DIM, DIM + 1, 8, 0]))
    dtype = draw(st.sampled_from(["<f4", "<f8", "<f2", "<i4", "|b1", "<c8"]))
    fill = draw(st.sampled_from([1.0, 0.0, 1e39, float("nan"), -2.5]))
    shape: tuple[int, ...] = draw(st.sampled_from([(rows, dim), (rows,), (rows, dim, 1)]))
    out = io.BytesIO()
    with np.errstate(all="ignore"):
        np.save(out, np.full(shape, fill).astype(dtype))
    data = out.getvalue()
    cut = draw(st.sampled_from([None, 10, len(data) // 2]))
    return data[:cut] if cut is not None else data


@st.composite
def multipart_uploads(draw: st.DrawFn) -> tuple[str, str, bytes, str]:
    """`/upload` as multipart: .npy vectors, ids, items, each maybe missing or garbled."""
    from urllib3 import encode_multipart_formdata

    parts: dict[str, Any] = {}
    if draw(st.booleans()) or draw(st.booleans()):
        parts["vectors"] = ("v.npy", draw(npy_files() | st.binary(max_size=64)))
    if draw(st.booleans()) or draw(st.booleans()):
        ids = draw(st.lists(st.text(max_size=6), max_size=4))
        parts["ids"] = ("ids.txt", "\n".join(ids).encode("utf-8", "surrogatepass"))
    if draw(st.booleans()):
        lines = draw(st.lists(json_values.map(json.dumps), max_size=4))
        parts["items"] = ("items.jsonl", "\n".join(lines).encode())
    if draw(st.booleans()):
        parts[draw(st.text(max_size=6))] = draw(st.text(max_size=12))
    body, content_type = encode_multipart_formdata(parts)
    return "POST", "/upload", body, content_type


@st.composite
def query_requests(draw: st.DrawFn) -> tuple[str, str, bytes, str]:
    path = draw(st.sampled_from(["/export", "/health", "/nowhere", "/upload"]))
    params = draw(
        st.dictionaries(
            st.sampled_from(["limit", "cursor", "include_vectors", "x"]),
            st.text(max_size=12) | st.integers(-5, 20_000).map(str),
            max_size=3,
        )
    )
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return "GET", f"{path}?{query}" if query else path, b"", ""


def fingerprint(client: FlaskClient) -> str:
    body = client.get("/export?include_vectors=true").get_data()
    return hashlib.sha256(body).hexdigest()


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlaskClient]:
    data: Path = tmp_path_factory.mktemp("fuzz")
    settings = Settings.load({"data_dir": data, "answer_min_score": 0}, {})
    store = Store(settings.data_dir)
    services = assemble(
        settings,
        store=store,
        llm=LLM(ScriptedBackend("A short answer."), max_waiters=2, timeout=5),
        embedder=HashEmbedder(dim=DIM),
    )
    client = create_app(settings, services).test_client()
    seed = [{"id": f"seed{i}", "vector": [float(i + 1)] * DIM, "text": "t"} for i in range(3)]
    assert client.post("/upload", json={"store_mode": "vector", "items": seed}).status_code == 200
    client.put("/namespaces/fz")
    client.put("/namespaces/fz/collections/docs")
    body = {"path": "a.md", "content_type": "text/markdown", "text": "Deploys freeze on Fridays."}
    assert client.post("/namespaces/fz/collections/docs/files", json=body).status_code == 202
    yield client
    store.close()


STATUSES: Counter[int] = Counter()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    phases=[Phase.generate],  # report the first failure as found; shrinking JSON is slow
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
@given(request=st.one_of(body_requests(), multipart_uploads(), query_requests()))
def test_no_request_gets_a_5xx_or_changes_the_store_when_rejected(
    fuzz_client: FlaskClient, request: tuple[str, str, bytes, str]
) -> None:
    method, path, raw, content_type = request
    before = fingerprint(fuzz_client)
    headers = {"Content-Type": content_type} if content_type else {}
    r = fuzz_client.open(path, method=method, data=raw, headers=headers)
    data = r.get_data()  # drains streams too
    STATUSES[r.status_code] += 1
    assert r.status_code < 500, (method, path, raw[:200], data[:300])
    if r.status_code >= 400:
        body = orjson.loads(data)
        assert isinstance(body, dict), data[:300]
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else body.get("message")
        assert message, data[:300]
        assert fingerprint(fuzz_client) == before, (method, path, raw[:200])


def test_fuzz_report() -> None:
    """Prints the status mix of the run above (it must have run)."""
    total = sum(STATUSES.values())
    print(f"\nfuzz: {total} requests, statuses {dict(sorted(STATUSES.items()))}")
    assert total >= min(EXAMPLES, 100)
    assert all(status < 500 for status in STATUSES)
