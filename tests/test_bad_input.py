"""Bad input never hurts: a clear 4xx JSON error naming the field, never a 500,
and the store unchanged afterwards. Runs in-process and over a real socket."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.http_client import Api, InProcess, OverSocket, serve_in_thread
from tests.test_moorcheh_api import DIM, make_app, unit

GOOD = [{"id": f"g{i}", "vector": unit(i), "text": f"text {i}"} for i in range(3)]


def up(items: Any, mode: Any = "vector") -> dict[str, Any]:
    return {"store_mode": mode, "items": items}


def item(**overrides: Any) -> dict[str, Any]:
    return {"id": "new", "vector": unit(42), "text": "t", **overrides}


# (method, path, json body or raw bytes, expected status, fragment of the message)
CASES: list[tuple[str, str, Any, int, str]] = [
    ("POST", "/upload", up([item(vector=unit(1, 256))]), 409, "dimension 256"),
    ("POST", "/upload", up([item(vector=unit(1, 64))]), 400, "allowed: 128 to 4096"),
    ("POST", "/upload", up([item(vector=[])]), 400, "0 dimensions"),
    ("POST", "/upload", up([item(vector=["a"] * DIM)]), 400, "items[0].vector[0] must be a number"),
    ("POST", "/upload", up([item(vector="abc")]), 400, "items[0].vector must be a list"),
    ("POST", "/search", {"query": ["a"] * DIM}, 400, "query[0] must be a number"),
    ("POST", "/upload", up([item(vector=[True] * DIM)]), 400, "got bool"),
    ("POST", "/upload", up([item(vector=[1e39] * DIM)]), 400, "float32 range"),
    ("POST", "/upload", up([item(vector=[0.0] * DIM)]), 400, "all zeros"),
    ("POST", "/upload", up([item(), item()]), 400, "duplicate id 'new'"),
    ("POST", "/upload", up([item(id=5)]), 400, "items.0.id"),
    ("POST", "/upload", up([item(id="")]), 400, "items.0.id"),
    ("POST", "/upload", up([item(), item(id="x", vector=unit(1)[:-1])]), 400, "items[1].vector"),
    ("POST", "/upload", up([item(metadata={"a": {"nested": 1}})]), 400, "items.0.metadata.a"),
    ("POST", "/upload", up([item()], mode="text"), 409, "vector mode"),
    ("POST", "/upload", up([item()], mode="graph"), 400, "store_mode"),
    ("POST", "/upload", up([]), 400, "items"),
    ("POST", "/upload", up("nope"), 400, "items"),
    ("POST", "/upload", {"items": [item()]}, 400, "store_mode"),
    ("POST", "/upload", up([{"id": "novec", "text": "t"}]), 400, "items[0].vector is required"),
    (
        "POST",
        "/upload",
        b'{"store_mode": "vector", "items": [{"id": "n", "vector": [NaN]}]}',
        400,
        "invalid JSON",
    ),
    (
        "POST",
        "/upload",
        b'{"store_mode": "vector", "items": [{"id": "n", "vector": [1e999]}]}',
        400,
        "invalid JSON",
    ),
    ("POST", "/upload", b"{not json", 400, "invalid JSON"),
    ("POST", "/upload", b"[1, 2]", 400, "JSON object"),
    ("POST", "/upload", b"", 400, "empty"),
    ("POST", "/search", {"query": unit(1)[:-1]}, 400, f"{DIM - 1} dimensions, the store has {DIM}"),
    ("POST", "/search", {"query": [float("1e39")] * DIM}, 400, "float32 range"),
    ("POST", "/search", {"query": unit(1), "top_k": 0}, 400, "top_k"),
    ("POST", "/search", {"query": unit(1), "top_k": -1}, 400, "top_k"),
    ("POST", "/search", {"query": unit(1), "top_k": 1_000_000}, 400, "top_k"),
    ("POST", "/search", {"query": unit(1), "top_k": "5"}, 400, "top_k"),
    ("POST", "/search", {"query": unit(1), "top_k": 2.5}, 400, "top_k"),
    ("POST", "/search", {"query": unit(1), "kiosk_mode": True}, 400, "threshold is required"),
    ("POST", "/search", {"query": unit(1), "kiosk_mode": True, "threshold": 2}, 400, "threshold"),
    ("POST", "/search", {"query": unit(1), "threshold": "high"}, 400, "threshold"),
    ("POST", "/search", {"query": 7}, 400, "query"),
    ("POST", "/search", {"query": ""}, 400, "query: empty text"),
    ("POST", "/search", {}, 400, "query"),
    ("POST", "/search", {"query": unit(1), "metadata": "x"}, 400, "metadata"),
    ("DELETE", "/items", {"ids": []}, 400, "ids"),
    ("DELETE", "/items", {"ids": [1, 2]}, 400, "ids.0"),
    ("DELETE", "/items", {}, 400, "ids"),
    ("GET", "/export?limit=abc", None, 400, "limit"),
    ("GET", "/export?limit=0", None, 400, "limit"),
    ("GET", "/export?include_vectors=maybe", None, 400, "include_vectors"),
]


@pytest.fixture(params=["in-process", "socket"], scope="module")
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    app = make_app(tmp_path_factory.mktemp(request.param), max_body_mb=0.5)
    if request.param == "in-process":
        client: Api = InProcess(app)
        assert client.call("POST", "/upload", up(GOOD)).status == 200
        yield client
        return
    with serve_in_thread(app) as base:
        sock = OverSocket(base)
        assert sock.call("POST", "/upload", up(GOOD)).status == 200
        yield sock
        sock.close()


def snapshot(api: Api) -> tuple[Any, Any]:
    health = api.call("GET", "/health").body
    export = api.call("GET", "/export?include_vectors=true").body
    return ({k: health[k] for k in ("dimension", "store_mode", "items")}, export)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "fragment"),
    CASES,
    ids=[f"{m} {p} #{i}" for i, (m, p, *_rest) in enumerate(CASES)],
)
def test_bad_request_is_a_clear_4xx_and_changes_nothing(
    api: Api, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    before = snapshot(api)
    if isinstance(body, bytes):
        r = api.call(method, path, data=body, headers={"Content-Type": "application/json"})
    else:
        r = api.call(method, path, body)
    assert r.status == status, r.body
    assert r.headers["Content-Type"].startswith("application/json")
    assert fragment in r.body["message"], r.body["message"]
    assert snapshot(api) == before


def test_wrong_content_type_is_415(api: Api) -> None:
    before = snapshot(api)
    r = api.call(
        "POST", "/upload", data=b'{"store_mode":"vector"}', headers={"Content-Type": "text/plain"}
    )
    assert r.status == 415 and "application/json" in r.body["message"]
    assert snapshot(api) == before


def test_oversized_body_is_413(api: Api) -> None:
    before = snapshot(api)
    big = {"store_mode": "vector", "items": [item(id=f"b{i}") for i in range(400)]}
    r = api.call("POST", "/upload", big)
    assert r.status == 413 and "--max-body-mb" in r.body["message"]
    assert snapshot(api) == before


def test_unknown_route_and_method_are_json(api: Api) -> None:
    assert api.call("GET", "/nope").status == 404
    r = api.call("PUT", "/upload", {})
    assert r.status == 405 and r.body["status"] == "error"
