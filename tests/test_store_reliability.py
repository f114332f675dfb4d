"""Store defects found by review and load, each reproduced as a user meets it:
a bad vector that bricked the store, two servers on one data directory,
replaced rows never reclaimed, restarts that re-appended, damaged collections."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from benches.search.compaction_search import fill_one_delete_short_of_compaction
from flask_app import simcore
from flask_app.store import Collection, CollectionUnavailable, DataDirLocked, Store
from flask_app.store.collection import COMPACT_MIN_DEAD
from tests.http_client import ServerProcess, free_port, start_server
from tests.stores import deny_commit

DIM = 384


def unit(seed: int, dim: int = DIM) -> list[float]:
    v = np.random.default_rng(seed).standard_normal(dim)
    return [float(x) for x in v / np.linalg.norm(v)]


def vector_server(data_dir: Path, log: Path) -> ServerProcess:
    return start_server(
        ["--no-llm", "--no-embedder", "--data-dir", str(data_dir), "--max-items", "off"],
        log,
        timeout=30,
    )


def upload(base: str, items: list[dict[str, object]]) -> requests.Response:
    return requests.post(
        base + "/upload", json={"store_mode": "vector", "items": items}, timeout=30
    )


def test_a_vector_without_direction_is_refused_and_the_store_keeps_serving(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    server = vector_server(tmp_path / "data", log)
    try:
        assert upload(server.base, [{"id": f"i{k}", "vector": unit(k)} for k in range(5)]).ok
        r = upload(server.base, [{"id": "tiny", "vector": [1e-30] * DIM}])
        assert r.status_code == 400, r.text
        assert "items[0].vector" in r.json()["message"]
        # a huge component is fine: normalised in float64, not overflowed to zeros
        big = upload(server.base, [{"id": "big", "vector": [1e30] + [0.1] * (DIM - 1)}])
        assert big.status_code == 200, big.text
        assert upload(server.base, [{"id": "after", "vector": unit(99)}]).ok
        assert requests.delete(server.base + "/items", json={"ids": ["i0"]}, timeout=10).ok
    finally:
        server.stop()
    server = vector_server(tmp_path / "data", log)
    try:
        assert requests.get(server.base + "/health", timeout=10).json()["items"] == 6
        hit = requests.post(
            server.base + "/search", json={"query": [1.0] + [0.0] * (DIM - 1), "top_k": 1}
        ).json()["results"][0]
        assert hit["id"] == "big" and hit["score"] > 0.99
        exported = requests.get(server.base + "/export?include_vectors=true", timeout=10).json()
        ids = {item["id"] for item in exported["items"]}
        assert ids == {"i1", "i2", "i3", "i4", "big", "after"}
    finally:
        server.stop()


def test_a_store_bricked_by_an_old_version_recovers_on_open(tmp_path: Path) -> None:
    """Older versions committed rows + a redo record the index then refused; every
    later write and every restart failed. Opening such a store now drops the
    unapplied (never acknowledged) batch and serves the rest."""
    c = Collection(tmp_path / "c")
    good = np.asarray([unit(k, 16) for k in range(5)], dtype=np.float32)
    c.upsert(
        [f"i{k}" for k in range(5)],
        good,
        ["t"] * 5,
        [None] * 5,
        mode="vector",
        embedding_model=None,
    )
    c.close()
    db = sqlite3.connect(tmp_path / "c" / "rows.sqlite", isolation_level=None)
    bad = np.full((1, 16), np.nan, dtype=np.float32)
    db.execute("INSERT INTO items VALUES ('tiny', '', NULL, 0, 0)")
    db.execute(
        "INSERT INTO pending (op, ids, vectors) VALUES ('upsert', ?, ?)",
        (json.dumps(["tiny"]), bad.tobytes()),
    )
    db.close()
    reopened = Collection(tmp_path / "c")
    assert len(reopened) == 5
    assert reopened.search(good[2], 1)[0].id == "i2"
    reopened.upsert(["x"], good[:1], ["t"], [None], mode="vector", embedding_model=None)
    assert len(reopened) == 6


def test_a_second_server_on_the_same_data_directory_refuses_to_start(tmp_path: Path) -> None:
    first = vector_server(tmp_path / "data", tmp_path / "a.log")
    try:
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "flask_app.cli",
                "serve",
                "--no-llm",
                "--no-embedder",
                "--data-dir",
                str(tmp_path / "data"),
                "--port",
                str(free_port()),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert "in use by another edgerag process" in second.stderr
        assert str(first.proc.pid) in second.stderr
        assert requests.get(first.base + "/health", timeout=10).ok
    finally:
        first.stop()


def test_the_data_directory_lock_is_exclusive_and_released_on_close(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with pytest.raises(DataDirLocked, match="in use"):
        Store(tmp_path)
    store.close()
    Store(tmp_path).close()


def index_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in (path / "index").rglob("*") if f.is_file())


def test_replaced_rows_are_reclaimed_and_restarts_do_not_reappend(tmp_path: Path) -> None:
    n = 1000
    ids = [f"id{k}" for k in range(n)]
    rng = np.random.default_rng(0)
    path = tmp_path / "c"
    c = Collection(path)
    sizes = []
    for _ in range(10):
        v = rng.standard_normal((n, DIM)).astype(np.float32)
        c.upsert(ids, v, ["t"] * n, [None] * n, mode="vector", embedding_model=None)
        sizes.append(index_bytes(path))
    assert c._index is not None
    rows = c._index.rows
    assert len(c) == n and rows <= 2 * n + COMPACT_MIN_DEAD, rows
    assert max(sizes) < 3.5 * sizes[0], sizes  # was 10x: every replaced row kept forever
    wal = path / "rows.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size <= 12 << 20
    c.close()
    for _ in range(3):  # each restart used to append the last batch again
        reopened = Collection(path)
        assert reopened._index is not None and reopened._index.rows == rows
        assert len(reopened) == n
        reopened.close()


def test_a_missing_index_with_stored_items_is_reported_not_emptied(tmp_path: Path) -> None:
    store = Store(tmp_path)
    c = store.edge()
    v = np.asarray([unit(k, 16) for k in range(3)], dtype=np.float32)
    c.upsert(["a", "b", "c"], v, ["t"] * 3, [None] * 3, mode="vector", embedding_model=None)
    c.upsert(["d"], v[:1], ["t"], [None], mode="vector", embedding_model=None)
    store.close()
    (c.path / "index" / "CURRENT").unlink()
    store = Store(tmp_path)
    with pytest.raises(CollectionUnavailable, match="CURRENT is missing"):
        store.edge()
    assert "_edge/store" in store.failures()
    # other collections keep working
    other = store.collection("ns", "other")
    other.upsert(["x"], v[:1], ["t"], [None], mode="vector", embedding_model=None)
    assert other.search(v[0], 1)[0].id == "x"
    store.close()


def test_a_corrupt_collection_is_reported_by_health_and_refused_alone(tmp_path: Path) -> None:
    from flask_app.app import create_app
    from flask_app.services import assemble
    from flask_app.settings import Settings

    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    store = Store(settings.data_dir)
    c = store.edge()
    v = np.asarray([unit(k, 128) for k in range(2)], dtype=np.float32)
    c.upsert(["a", "b"], v, ["t"] * 2, [None] * 2, mode="vector", embedding_model=None)
    store.close()
    generation = next(p for p in (c.path / "index").iterdir() if p.is_dir())
    for f in generation.iterdir():
        f.write_bytes(b"garbage" * 10)
    app = create_app(
        settings, assemble(settings, store=Store(settings.data_dir), llm=None, embedder=None)
    )
    client = app.test_client()
    health = client.get("/health")
    assert health.status_code == 200
    body = health.get_json()
    assert body["status"] == "degraded" and "_edge/store" in body["unavailable"]
    r = client.post("/search", json={"query": v[0].tolist()})
    assert r.status_code == 503 and "unavailable" in r.get_json()["message"]


def test_a_failed_commit_is_rolled_back(tmp_path: Path) -> None:
    c = Collection(tmp_path / "c")
    v = np.asarray([unit(k, 16) for k in range(2)], dtype=np.float32)
    c.upsert(["a"], v[:1], ["t"], [None], mode="vector", embedding_model=None)

    real = c._db()
    real.set_authorizer(deny_commit)
    with pytest.raises(sqlite3.DatabaseError):
        c.upsert(["b"], v[1:], ["t"], [None], mode="vector", embedding_model=None)
    real.set_authorizer(None)
    assert not real.in_transaction  # was left open: every later write failed
    c.upsert(["c"], v[1:], ["t"], [None], mode="vector", embedding_model=None)
    assert sorted(i["id"] for i in c.export(limit=None, after=None, with_vectors=False)[0]) == [
        "a",
        "c",
    ]


def test_nan_rows_never_rank_first_and_huge_k_does_not_abort() -> None:
    rows = np.eye(4, dtype=np.float32)
    rows[0] = np.nan
    idx, scores = simcore.top_k(rows, np.ones(4, dtype=np.float32), 2)
    assert 0 not in idx.tolist() and np.isfinite(scores).all()
    index = simcore.Index(4)
    index.upsert(["a", "b"], np.eye(4, dtype=np.float32)[:2])
    ids, _ = index.search(np.ones(4, dtype=np.float32), 100_000, mode="int8", oversample=10**9)
    assert sorted(ids) == ["a", "b"]


def test_a_query_with_huge_components_still_finds_its_match(tmp_path: Path) -> None:
    """Normalised in float32, [1e30, ...] overflowed to a zero query."""
    c = Collection(tmp_path / "c")
    v = np.eye(4, dtype=np.float32)
    c.upsert(["a", "b", "c", "d"], v, ["t"] * 4, [None] * 4, mode="vector", embedding_model=None)
    hits = c.search(np.array([0.0, 0.0, 1e30, 1.0], dtype=np.float32), 1)
    assert hits[0].id == "c" and hits[0].score > 0.99


def test_searches_go_on_while_a_compaction_rewrites_the_index(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A compaction of many rows used to hold the write lock throughout, so
    every search waited for it; now searches wait only for the switch."""
    import threading
    import time

    caplog.set_level("INFO", logger="edgerag.store")
    n, dim = 60_000, 128
    rng = np.random.default_rng(3)
    collection = Store(tmp_path / "data").edge()
    ids = fill_one_delete_short_of_compaction(collection, n, dim, seed=3)
    assert not any("compacting" in r.getMessage() for r in caplog.records)

    deleter = threading.Thread(target=lambda: collection.delete([ids[0]]))
    finished: list[float] = []
    query = rng.standard_normal(dim).astype(np.float32)
    deleter.start()
    deadline = time.monotonic() + 30
    while deleter.is_alive() and time.monotonic() < deadline and len(finished) < 10_000:
        collection.search(query, 5)
        finished.append(time.time())
    deleter.join(30)

    times = {
        word: next(
            r.created for r in caplog.records if r.getMessage().split(": ")[-1].startswith(word)
        )
        for word in ("compacting", "compacted")
    }
    during = [t for t in finished if times["compacting"] < t < times["compacted"]]
    took = times["compacted"] - times["compacting"]
    assert len(during) >= 3, f"{len(during)} searches finished during a {took:.3f} s compaction"
    assert len(collection) == n - 1 and collection.info().dimension == dim


def test_a_failed_compaction_does_not_fail_the_committed_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The write is committed before its compaction: a compaction error is
    logged and the next write tries again."""

    class FailingOnce:
        def __init__(self, index: simcore.Index) -> None:
            self.index, self.failures = index, 1

        def __getattr__(self, name: str) -> Any:
            return getattr(self.index, name)

        def __contains__(self, item_id: str) -> bool:
            return item_id in self.index

        def compact(self) -> bool:
            if self.failures:
                self.failures -= 1
                raise OSError(28, "No space left on device")
            return self.index.compact()

    caplog.set_level("INFO", logger="edgerag.store")
    collection = Store(tmp_path / "data").edge()
    n = 2 * COMPACT_MIN_DEAD + 10
    ids = [f"r{i}" for i in range(n)]
    vectors = np.random.default_rng(5).standard_normal((n, 16)).astype(np.float32)
    collection.upsert(ids, vectors, ids, [None] * n, mode="vector", embedding_model=None)
    collection._index = FailingOnce(collection._index)  # type: ignore[assignment,arg-type]
    assert collection.delete(ids[: n // 2 + 1]) == (n // 2 + 1, [])
    assert any("compaction failed" in r.getMessage() for r in caplog.records)
    assert len(collection) == n - (n // 2 + 1)
    assert collection.delete([ids[-1]]) == (1, [])  # the next write compacts
    assert any("compacted" in r.getMessage() for r in caplog.records)
    assert collection._index is not None and collection._index.rows == len(collection)
