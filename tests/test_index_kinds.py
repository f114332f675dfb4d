"""A collection's index kind (f32, int8, binary): how its searches scan,
kept across restarts, settable on the moorcheh-edge store (`--store-index`)
and on Engine collections (`index` in PUT)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flask_app import simcore
from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder
from flask_app.services import assemble
from flask_app.settings import Settings, SettingsError
from flask_app.store import Collection, Store


def unit(n: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def put(collection: Collection, ids: list[str], rows: np.ndarray) -> None:
    texts = [f"text {i}" for i in ids]
    collection.upsert(ids, rows, texts, [None] * len(ids), mode="vector", embedding_model=None)


def filled(store: Store, n: int = 3000, dim: int = 64) -> tuple[Collection, np.ndarray]:
    edge = store.edge()
    rows = unit(n, dim, 1)
    put(edge, [f"v{i}" for i in range(n)], rows)
    return edge, rows


# Recall@10 of neighbours 0.3 away on random 64-d vectors, the hard case for
# sign bits (real text: benches/search/binary_codes.py); an exact scan would give 1.0.
@pytest.mark.parametrize(("kind", "least_recall"), [("int8", 0.95), ("binary", 0.6)])
def test_each_kind_finds_stored_vectors_with_exact_scores(
    tmp_path: Path, kind: str, least_recall: float
) -> None:
    store = Store(tmp_path)
    edge, rows = filled(store)
    assert edge.index_kind == "f32" and edge.info().index == "f32"
    edge.set_index(kind)
    assert edge.info().index == kind
    recalled = 0
    for i in range(0, 3000, 150):
        hits = edge.search(rows[i], 10)
        assert hits[0].id == f"v{i}"
        by_score = [h.id for h in sorted(edge.search(rows[i], 10), key=lambda h: -h.score)]
        assert [h.id for h in hits] == by_score  # best first
        for h in hits:  # rescored: the scores are the exact cosines
            assert h.score == pytest.approx(float(rows[int(h.id[1:])] @ rows[i]), abs=1e-5)
        edge.set_index("f32")
        truth = {h.id for h in edge.search(rows[i] + 0.3 * unit(1, 64, i)[0], 10)}
        edge.set_index(kind)
        found = {h.id for h in edge.search(rows[i] + 0.3 * unit(1, 64, i)[0], 10)}
        recalled += len(truth & found)
    assert recalled / 200 >= least_recall, recalled
    if kind == "binary":
        assert recalled < 200  # the sign bits were scanned, not the f32 rows
    store.close()


def test_the_kind_survives_a_restart_and_binary_codes_are_built_at_open(tmp_path: Path) -> None:
    store = Store(tmp_path)
    edge, rows = filled(store)
    edge.set_index("binary")
    store.close()
    store = Store(tmp_path)
    edge = store.edge()
    assert edge.index_kind == "binary"
    assert edge._index is not None and edge._index.binary_bytes == 3000 * 8  # 64 dims: one word
    assert edge.search(rows[7], 3)[0].id == "v7"
    with pytest.raises(ValueError, match="index must be one of"):
        edge.set_index("pq")
    store.close()


def test_binary_codes_follow_writes_made_after_the_switch(tmp_path: Path) -> None:
    store = Store(tmp_path)
    edge, _ = filled(store, n=500)
    edge.set_index("binary")
    fresh = unit(5, 64, 9)
    put(edge, [f"n{i}" for i in range(5)], fresh)
    edge.delete(["v3"])
    for i in range(5):
        assert edge.search(fresh[i], 1)[0].id == f"n{i}"
    store.close()


def test_store_index_setting_applies_to_the_edge_store_and_survives_clearing(
    tmp_path: Path,
) -> None:
    with pytest.raises(SettingsError, match="store_index"):
        Settings.load({"store_index": "pq"}, {})
    store = Store(tmp_path, edge_index="binary")
    edge, _ = filled(store, n=200)
    assert edge.index_kind == "binary"
    store.drop(Store.EDGE_NAMESPACE, Store.EDGE_COLLECTION)
    assert store.edge().index_kind == "binary"
    settings = Settings.load({"data_dir": tmp_path}, {})
    app = create_app(settings, assemble(settings, store, None, None))
    assert app.test_client().get("/health").get_json()["store_index"] == "binary"
    store.close()


def test_engine_collections_take_an_index_kind(tmp_path: Path) -> None:
    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    first = Store(settings.data_dir)
    app = create_app(settings, assemble(settings, first, None, HashEmbedder()))
    client = app.test_client()
    assert client.put("/namespaces/ops").status_code == 201
    r = client.put("/namespaces/ops/collections/docs", json={})
    assert r.status_code == 201 and r.get_json()["index"] == "f32"
    r = client.put("/namespaces/ops/collections/docs", json={"index": "binary"})
    assert r.status_code == 200 and r.get_json()["index"] == "binary"
    assert client.get("/namespaces/ops/collections/docs").get_json()["index"] == "binary"
    listed = client.get("/namespaces/ops/collections").get_json()["collections"]
    assert [c["index"] for c in listed] == ["binary"]
    r = client.put("/namespaces/ops/collections/docs", json={"index": "pq"})
    assert r.status_code == 400 and "index must be one of" in r.get_data(as_text=True)
    r = client.put("/namespaces/ops/collections/docs", json={"description": "kept"})
    assert r.get_json()["index"] == "binary"  # not given: unchanged
    # after a restart, listing reads the kind without opening the collection
    first.close()
    store = Store(settings.data_dir)
    app = create_app(settings, assemble(settings, store, None, HashEmbedder()))
    listed = app.test_client().get("/namespaces/ops/collections").get_json()["collections"]
    assert [c["index"] for c in listed] == ["binary"]
    assert ("ops", "docs") not in store._collections


def test_popcount_kernel_is_named() -> None:
    assert simcore.popcount_kernel() in ("vpopcntdq", "avx2", "scalar")


def test_a_binary_search_builds_the_codes_it_needs() -> None:
    index = simcore.Index(384)
    rows = unit(100, 384, 3)
    index.upsert([str(i) for i in range(100)], rows)
    assert index.binary_bytes == 0
    ids, scores = index.search(rows[42], 1, mode="binary", oversample=5)
    assert ids == ["42"] and scores[0] == pytest.approx(1.0, abs=1e-5)
    assert index.binary_bytes == 104 * 48  # 384 bits a row, in blocks of 8 rows
    with pytest.raises(simcore.SimcoreValueError, match="oversample"):
        index.search(rows[0], 1, mode="binary", oversample=0)
    batch = index.search_batch(rows[:3], 1, mode="binary", oversample=5)
    assert [found[0] for found in batch] == [["0"], ["1"], ["2"]]


def test_a_damaged_store_with_store_index_set_does_not_stop_the_server(tmp_path: Path) -> None:
    from flask_app.services import load_services

    store = Store(tmp_path)
    edge, _ = filled(store, n=20)
    put(edge, ["late"], unit(1, 64, 5))
    store.close()  # the first batch's redo record is gone: its rows need the index files
    (tmp_path / Store.EDGE_NAMESPACE / Store.EDGE_COLLECTION / "index" / "CURRENT").unlink()
    settings = Settings.load(
        {"data_dir": tmp_path, "store_index": "binary", "no_llm": True, "no_embedder": True}, {}
    )
    services = load_services(settings)
    assert "_edge/store" in services.store.failures()
    services.store.close()
