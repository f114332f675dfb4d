"""Store internals: redo-log recovery and atomic visibility of batches."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from flask_app import simcore
from flask_app.store import Collection, Store


def vecs(n: int, seed: int, dim: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def upsert(c: Collection, ids: list[str], v: np.ndarray, text: str = "t") -> int:
    return c.upsert(
        ids, v, [text] * len(ids), [None] * len(ids), mode="vector", embedding_model=None
    )


class Boom(RuntimeError):
    pass


class FlakyIndex:
    """Wraps a real index; its next `failures` upserts raise."""

    def __init__(self, real: simcore.Index, failures: int) -> None:
        self.real = real
        self.failures = failures

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def __contains__(self, key: str) -> bool:
        return key in self.real

    def upsert(self, ids: list[str], vectors: np.ndarray) -> tuple[int, int]:
        if self.failures > 0:
            self.failures -= 1
            raise Boom("index write failed")
        return self.real.upsert(ids, vectors)


def test_index_failure_is_replayed_on_reopen(tmp_path: Path) -> None:
    c = Collection(tmp_path / "c")
    upsert(c, ["a"], vecs(1, 1))
    assert c._index is not None
    c._index = FlakyIndex(c._index, failures=1)  # type: ignore[assignment]
    v = vecs(2, 2)
    with pytest.raises(Boom):
        upsert(c, ["b", "c"], v)
    c.close()
    del c
    reopened = Collection(tmp_path / "c")
    hits = reopened.search(v[1], 1)
    assert hits[0].id == "c" and hits[0].score > 0.999
    assert len(reopened) == 3


def test_failed_apply_is_replayed_before_the_next_write(tmp_path: Path) -> None:
    c = Collection(tmp_path / "c")
    upsert(c, ["a"], vecs(1, 1))
    assert c._index is not None
    c._index = FlakyIndex(c._index, failures=1)  # type: ignore[assignment]
    v = vecs(1, 5)
    with pytest.raises(Boom):
        upsert(c, ["b"], v)
    upsert(c, ["z"], vecs(1, 6))  # replays "b" first
    assert c.search(v[0], 1)[0].id == "b"


def test_crash_before_the_first_index_commit(tmp_path: Path) -> None:
    c = Collection(tmp_path / "c")
    v = vecs(3, 3)
    c._open_index = lambda dim: (_ for _ in ()).throw(Boom("crash"))  # type: ignore[method-assign]
    with pytest.raises(Boom):
        upsert(c, ["a", "b", "c"], v)
    c.close()
    reopened = Collection(tmp_path / "c")
    assert reopened.info().dimension == 16
    assert reopened.search(v[2], 1)[0].id == "c"


def test_a_search_never_sees_half_a_batch(tmp_path: Path) -> None:
    c = Collection(tmp_path / "c")
    ids = [f"i{k}" for k in range(50)]
    upsert(c, ids, vecs(50, 0), text="gen-0")
    stop = threading.Event()
    mixed: list[set[str]] = []

    def reader() -> None:
        q = vecs(1, 99)[0]
        while not stop.is_set():
            gens = {h.text for h in c.search(q, 50)}
            if len(gens) != 1:
                mixed.append(gens)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + 2.0
    gen = 0
    while time.monotonic() < deadline and gen < 60:
        gen += 1
        upsert(c, ids, vecs(50, gen), text=f"gen-{gen}")
    stop.set()
    for t in readers:
        t.join(10)
    assert gen > 5
    assert not mixed, mixed[:3]


def test_drop_then_reuse_and_cleared_error(tmp_path: Path) -> None:
    store = Store(tmp_path)
    c = store.edge()
    upsert(c, ["a"], vecs(1, 1))
    store.drop(store.EDGE_NAMESPACE, store.EDGE_COLLECTION)
    with pytest.raises(Exception, match="cleared"):
        upsert(c, ["b"], vecs(1, 2))  # a request holding the old collection
    fresh = store.edge()
    assert len(fresh) == 0 and fresh.info().dimension is None
    upsert(fresh, ["b"], vecs(1, 2, dim=32))
    assert fresh.info().dimension == 32


def test_metadata_filter_follows_replacements_and_deletes(tmp_path: Path) -> None:
    c = Collection(tmp_path / "c")
    v = vecs(4, 7)
    c.upsert(
        ["a", "b", "c", "d"],
        v,
        ["t"] * 4,
        [{"tag": "x", "n": 1}, {"tag": "x", "n": 1.0}, {"tag": "y", "ok": True}, {"ok": 1}],
        mode="vector",
        embedding_model=None,
    )
    assert sorted(c.matching_ids({"tag": "x"})) == ["a", "b"]
    assert sorted(c.matching_ids({"n": 1})) == ["a", "b"]  # 1 == 1.0
    assert c.matching_ids({"ok": True}) == ["c"]  # true is not the number 1
    assert c.matching_ids({"ok": 1}) == ["d"]
    assert c.matching_ids({"tag": "x", "n": 1.0}) and c.matching_ids({"tag": "y", "n": 1}) == []
    c.upsert(["a"], v[:1], ["t"], [{"tag": "z"}], mode="vector", embedding_model=None)
    assert c.matching_ids({"tag": "x"}) == ["b"] and c.matching_ids({"tag": "z"}) == ["a"]
    assert c.matching_ids({"n": 1}) == ["b"]
    c.delete(["b"])
    assert c.matching_ids({"tag": "x"}) == []
    assert [h.id for h in c.search(v[0], 4, metadata={})] == [h.id for h in c.search(v[0], 4)]
