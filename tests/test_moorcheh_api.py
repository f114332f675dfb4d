"""moorcheh-edge data API (spec §9 compatibility cases and edgerag's extensions),
in-process and over a real socket through waitress."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from flask import Flask

from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.settings import Settings
from tests import stores
from tests.http_client import Api, InProcess, OverSocket, serve_in_thread

DIM = 128


def unit(seed: int, dim: int = DIM) -> list[float]:
    v = np.random.default_rng(seed).standard_normal(dim)
    return [float(x) for x in v / np.linalg.norm(v)]


def make_app(tmp_path: Path, **options: object) -> Flask:
    settings = Settings.load({"data_dir": tmp_path / "data", **options}, {})
    services = stores.services(
        settings, LLM(ScriptedBackend(), max_waiters=2), HashEmbedder(dim=384)
    )
    return create_app(settings, services)


@pytest.fixture(params=["in-process", "socket"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Api]:
    app = make_app(tmp_path)
    if request.param == "in-process":
        yield InProcess(app)
    else:
        with serve_in_thread(app) as base:
            client = OverSocket(base)
            yield client
            client.close()


def upload_vectors(api: Api, ids: list[str], seed0: int = 0, **extra: object) -> dict[str, object]:
    items = [{"id": i, "vector": unit(seed0 + n), **extra} for n, i in enumerate(ids)]
    r = api.call("POST", "/upload", {"store_mode": "vector", "items": items})
    assert r.status == 200, r.body
    return dict(r.body)


# --- §9 compatibility cases -------------------------------------------------


def test_1_health_on_empty_store(api: Api) -> None:
    body = api.call("GET", "/health").body
    assert {
        k: body[k]
        for k in (
            "status",
            "dimension",
            "store_mode",
            "store_index",
            "embedding_model",
            "items",
            "max_items",
            "remaining",
        )
    } == {
        "status": "ok",
        "dimension": None,
        "store_mode": None,
        "store_index": "f32",
        "embedding_model": None,
        "items": 0,
        "max_items": 10000,
        "remaining": 10000,
    }


def test_2_vector_upload_locks_mode_and_dimension(api: Api) -> None:
    assert upload_vectors(api, ["a"]) == {"status": "success", "total": 1}
    body = api.call("GET", "/health").body
    assert (body["dimension"], body["store_mode"], body["items"], body["remaining"]) == (
        DIM,
        "vector",
        1,
        9999,
    )


def test_3_text_upload_with_client_vectors(api: Api) -> None:
    r = api.call(
        "POST",
        "/upload",
        {
            "store_mode": "text",
            "embedding_model": "BAAI/bge-small-en-v1.5",
            "items": [{"id": "doc-1", "text": "hello", "vector": unit(1, 384)}],
        },
    )
    assert (r.status, r.body) == (200, {"status": "success", "total": 1})
    health = api.call("GET", "/health").body
    assert health["embedding_model"] == "BAAI/bge-small-en-v1.5" and health["dimension"] == 384


def test_4_wrong_dimension_is_rejected_and_store_unchanged(api: Api) -> None:
    upload_vectors(api, ["a"])
    r = api.call(
        "POST",
        "/upload",
        {"store_mode": "vector", "items": [{"id": "bad", "vector": unit(2, 256)}]},
    )
    assert r.status in (400, 409) and "dimension" in r.body["message"]
    r = api.call(
        "POST",
        "/upload",
        {"store_mode": "vector", "items": [{"id": "bad", "vector": [0.1, 0.2, 0.3]}]},
    )
    assert r.status == 400 and "128 to 4096" in r.body["message"]
    assert api.call("GET", "/health").body["items"] == 1


def test_5_item_cap_exact_body_and_store_unchanged(tmp_path: Path) -> None:
    api = InProcess(make_app(tmp_path, max_items=10))
    upload_vectors(api, [f"x{i}" for i in range(4)])
    r = api.call(
        "POST",
        "/upload",
        {
            "store_mode": "vector",
            "items": [{"id": f"y{i}", "vector": unit(100 + i)} for i in range(7)],
        },
    )
    assert r.status == 409
    assert r.body == {
        "status": "failure",
        "message": "Item limit exceeded: max 10, current 4, requested 7 new items.",
        "items": 4,
        "max_items": 10,
        "requested_new": 7,
    }
    assert api.call("GET", "/health").body["items"] == 4
    # re-uploading existing ids uses no quota
    assert upload_vectors(api, [f"x{i}" for i in range(4)], seed0=50)["total"] == 4


def test_6_search_finds_exact_duplicate_as_close_match(api: Api) -> None:
    api.call(
        "POST",
        "/upload",
        {
            "store_mode": "text",
            "embedding_model": "m",
            "items": [
                {"id": "doc-1", "text": "hello", "vector": unit(7)},
                {"id": "doc-2", "text": "other", "vector": unit(8)},
            ],
        },
    )
    r = api.call("POST", "/search", {"query": unit(7), "top_k": 1})
    assert r.status == 200
    assert r.body["results"] == [
        {"id": "doc-1", "score": 1.0, "label": "Close Match", "text": "hello"}
    ]
    assert isinstance(r.body["execution_time"], float)


def test_7_kiosk_threshold_filters(api: Api) -> None:
    upload_vectors(api, ["a", "b", "c"])
    r = api.call(
        "POST", "/search", {"query": unit(99), "top_k": 5, "kiosk_mode": True, "threshold": 0.99}
    )
    assert r.body["results"] == []
    # threshold without kiosk_mode is ignored (the SDK sends it anyway)
    r = api.call("POST", "/search", {"query": unit(99), "top_k": 5, "threshold": 0.99})
    assert len(r.body["results"]) == 3


def test_8_labels() -> None:
    from flask_app.api.moorcheh.scores import label

    assert [label(s) for s in (0.9, 0.7, 0.5, 0.35, 0.25, 0.15, 0.05)] == [
        "Close Match",
        "Very High Relevance",
        "High Relevance",
        "Good Relevance",
        "Low Relevance",
        "Very Low Relevance",
        "Irrelevant",
    ]


def test_14_delete_reports_missing(api: Api) -> None:
    upload_vectors(api, ["id-1"])
    r = api.call("DELETE", "/items", {"ids": ["id-1", "id-2"]})
    assert r.body == {"status": "success", "deleted": 1, "not_found_ids": ["id-2"]}
    assert api.call("GET", "/health").body["items"] == 0


def test_14_legacy_delete_path(api: Api) -> None:
    upload_vectors(api, ["id-1"])
    r = api.call("DELETE", "/delete", {"ids": ["id-1"]})
    assert r.body == {"status": "success", "deleted": 1, "not_found_ids": []}


def test_15_clear_resets_mode_and_dimension(api: Api) -> None:
    upload_vectors(api, ["a"])
    r = api.call("DELETE", "/store")
    assert r.body == {"status": "success", "message": "Store cleared successfully."}
    body = api.call("GET", "/health").body
    assert (body["dimension"], body["store_mode"], body["items"]) == (None, None, 0)
    r = api.call(
        "POST", "/upload", {"store_mode": "vector", "items": [{"id": "z", "vector": unit(3, 200)}]}
    )
    assert r.status == 200 and api.call("GET", "/health").body["dimension"] == 200


def test_16_export(api: Api) -> None:
    api.call(
        "POST",
        "/upload",
        {
            "store_mode": "text",
            "embedding_model": "m",
            "items": [{"id": "hours", "text": "Open.", "vector": unit(1)}],
        },
    )
    body = api.call("GET", "/export").body
    assert body == {
        "status": "ok",
        "dimension": DIM,
        "store_mode": "text",
        "embedding_model": "m",
        "item_count": 1,
        "items": [{"id": "hours", "text": "Open."}],
    }


def test_legacy_upload_shape(api: Api) -> None:
    r = api.call("POST", "/upload", {"vectors": [{"id": "v1", "vector": unit(1)}]})
    assert (r.status, r.body) == (200, {"status": "success", "total": 1})
    assert api.call("GET", "/health").body["store_mode"] == "vector"


def test_17_errors_are_json_with_message(api: Api) -> None:
    r = api.call("POST", "/search", {"query": "x"})  # empty store, text query: fine
    assert r.status == 200
    r = api.call("POST", "/upload", {"store_mode": "vector"})
    assert r.status == 400 and r.body["message"] and r.body["status"] == "error"


# --- beyond moorcheh-edge -----------------------------------------------------


def test_text_upload_without_vectors_and_text_query(api: Api) -> None:
    docs = [
        {"id": "apple", "text": "red apples grow on apple trees"},
        {"id": "ocean", "text": "whales swim in the deep ocean"},
    ]
    r = api.call("POST", "/upload", {"store_mode": "text", "items": docs})
    assert r.status == 200 and r.body["total"] == 2
    health = api.call("GET", "/health").body
    assert health["embedding_model"] == "hash-fake-384" and health["dimension"] == 384
    r = api.call("POST", "/search", {"query": "where do whales swim", "top_k": 1})
    assert r.body["results"][0]["id"] == "ocean"


def test_text_query_against_foreign_embeddings_is_refused(api: Api) -> None:
    api.call(
        "POST",
        "/upload",
        {
            "store_mode": "text",
            "embedding_model": "BAAI/bge-small-en-v1.5",
            "items": [{"id": "d", "text": "t", "vector": unit(1, 384)}],
        },
    )
    r = api.call("POST", "/search", {"query": "anything"})
    assert r.status == 400 and "BAAI/bge-small-en-v1.5" in r.body["message"]


def test_metadata_filter_uses_filtered_search(api: Api) -> None:
    items = [
        {
            "id": f"d{i}",
            "vector": unit(i),
            "text": f"t{i}",
            "metadata": {"lang": "en" if i % 2 else "de", "year": 2020 + i % 3, "ok": i < 5},
        }
        for i in range(10)
    ]
    api.call("POST", "/upload", {"store_mode": "vector", "items": items})
    r = api.call("POST", "/search", {"query": unit(4), "top_k": 10, "metadata": {"lang": "de"}})
    ids = [h["id"] for h in r.body["results"]]
    assert sorted(ids) == ["d0", "d2", "d4", "d6", "d8"] and ids[0] == "d4"
    assert r.body["results"][0]["metadata"] == {"lang": "de", "year": 2021, "ok": True}
    r = api.call(
        "POST",
        "/search",
        {"query": unit(4), "top_k": 10, "metadata": {"lang": "en", "year": 2020, "ok": False}},
    )
    assert [h["id"] for h in r.body["results"]] == ["d9"]
    r = api.call("POST", "/search", {"query": unit(4), "metadata": {"lang": "fr"}})
    assert r.body["results"] == []


def test_filter_keeps_top_k_beyond_unfiltered_top_k(api: Api) -> None:
    # the only matching item is far from the query: a post-filtered top-k would miss it
    items = [
        {"id": f"d{i}", "vector": unit(i), "metadata": {"tag": "rare" if i == 37 else "common"}}
        for i in range(60)
    ]
    api.call("POST", "/upload", {"store_mode": "vector", "items": items})
    r = api.call("POST", "/search", {"query": unit(0), "top_k": 1, "metadata": {"tag": "rare"}})
    assert [h["id"] for h in r.body["results"]] == ["d37"]


def test_export_pagination_and_vectors(api: Api) -> None:
    upload_vectors(api, [f"id-{i:02d}" for i in range(5)])
    first = api.call("GET", "/export?limit=2").body
    assert [i["id"] for i in first["items"]] == ["id-00", "id-01"] and first["item_count"] == 5
    second = api.call("GET", f"/export?limit=2&cursor={first['next_cursor']}").body
    assert [i["id"] for i in second["items"]] == ["id-02", "id-03"]
    last = api.call("GET", f"/export?limit=2&cursor={second['next_cursor']}").body
    assert [i["id"] for i in last["items"]] == ["id-04"] and last["next_cursor"] is None
    with_vectors = api.call("GET", "/export?limit=1&include_vectors=true").body
    np.testing.assert_allclose(with_vectors["items"][0]["vector"], unit(0), atol=1e-6)


def test_upsert_replaces_text_and_vector(api: Api) -> None:
    api.call(
        "POST",
        "/upload",
        {"store_mode": "vector", "items": [{"id": "a", "vector": unit(1), "text": "old"}]},
    )
    api.call(
        "POST",
        "/upload",
        {"store_mode": "vector", "items": [{"id": "a", "vector": unit(2), "text": "new"}]},
    )
    r = api.call("POST", "/search", {"query": unit(2), "top_k": 5})
    assert r.body["results"] == [{"id": "a", "score": 1.0, "label": "Close Match", "text": "new"}]


def test_no_cap_with_max_items_off(tmp_path: Path) -> None:
    api = InProcess(make_app(tmp_path, max_items="off"))
    upload_vectors(api, [f"x{i}" for i in range(20)])
    body = api.call("GET", "/health").body
    assert (body["items"], body["max_items"], body["remaining"]) == (20, None, None)


def test_score_mappings(tmp_path: Path) -> None:
    e1, e2 = [1.0] + [0.0] * (DIM - 1), [0.0, 1.0] + [0.0] * (DIM - 2)
    for mapping, want in (("clip", 0.0), ("shift", 0.5)):
        api = InProcess(make_app(tmp_path / mapping, score_mapping=mapping))
        api.call("POST", "/upload", {"store_mode": "vector", "items": [{"id": "o", "vector": e2}]})
        hit = api.call("POST", "/search", {"query": e1}).body["results"][0]
        assert (hit["score"], hit["label"]) == (
            want,
            "Irrelevant" if want < 0.1 else "High Relevance",
        )
