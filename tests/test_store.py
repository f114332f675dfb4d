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
    """Wraps a real index; its next `failures` staged upserts (what a
    collection's upsert calls) raise, before writing or (`after`) once the
    batch is appended, as a crash between the index's commit and the rows'
    would."""

    def __init__(self, real: simcore.Index, failures: int, *, after: bool = False) -> None:
        self.real = real
        self.failures = failures
        self.after = after

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def __contains__(self, key: str) -> bool:
        return key in self.real

    def stage_upsert(self, ids: list[str], vectors: np.ndarray) -> None:
        if self.failures > 0:
            self.failures -= 1
            if self.after:
                self.real.stage_upsert(ids, vectors)
            raise Boom("index write failed")
        self.real.stage_upsert(ids, vectors)


@pytest.mark.parametrize("after", [False, True])
def test_a_failed_write_is_undone_on_reopen(tmp_path: Path, after: bool) -> None:
    c = Collection(tmp_path / "c")
    old = vecs(2, 1)
    upsert(c, ["a", "b"], old, text="old")
    assert c._index is not None
    c._index = FlakyIndex(c._index, failures=1, after=after)  # type: ignore[assignment]
    with pytest.raises(Boom):
        upsert(c, ["b", "c"], vecs(2, 2), text="new")  # replaces b, adds c
    c.close()
    del c
    reopened = Collection(tmp_path / "c")
    assert len(reopened) == 2 and "c" not in reopened.items(["c"])
    hits = reopened.search(old[1], 3)
    assert [h.id for h in hits] == ["b", "a"]
    assert hits[0].score > 0.999 and hits[0].text == "old"
    assert reopened._index is not None and len(reopened._index) == 2


@pytest.mark.parametrize("after", [False, True])
def test_a_failed_write_is_undone_at_once(tmp_path: Path, after: bool) -> None:
    c = Collection(tmp_path / "c")
    old = vecs(1, 1)
    upsert(c, ["a"], old)
    assert c._index is not None
    c._index = FlakyIndex(c._index, failures=1, after=after)  # type: ignore[assignment]
    with pytest.raises(Boom):
        upsert(c, ["a", "b"], vecs(2, 5))
    # undone at once: no search sees a vector without its row
    assert c._index is not None and "b" not in c._index
    assert c.search(old[0], 1)[0].score > 0.999
    upsert(c, ["z"], vecs(1, 6))
    assert len(c) == 2 and sorted(c.items(["a", "b", "z"])) == ["a", "z"]
    assert c.search(old[0], 1)[0].score > 0.999


@pytest.mark.parametrize("after", [False, True])
def test_a_failed_first_write_leaves_an_empty_collection(tmp_path: Path, after: bool) -> None:
    c = Collection(tmp_path / "c")
    if after:
        real_open = c._open_index

        def flaky_open(dim: int) -> simcore.Index:
            return FlakyIndex(real_open(dim), failures=1, after=True)  # type: ignore[return-value]

        c._open_index = flaky_open  # type: ignore[method-assign]
    else:
        c._open_index = lambda dim: (_ for _ in ()).throw(Boom("crash"))  # type: ignore[method-assign]
    with pytest.raises(Boom):
        upsert(c, ["a", "b", "c"], vecs(3, 3))
    c.close()
    reopened = Collection(tmp_path / "c")
    assert reopened.info().dimension is None and len(reopened) == 0
    assert not (tmp_path / "c" / "index").exists()
    v = vecs(2, 4, dim=32)  # the failed batch fixed nothing: another dimension is fine
    upsert(reopened, ["x", "y"], v)
    assert reopened.search(v[1], 1)[0].id == "y"


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


@pytest.mark.parametrize("kind", ["f32", "int8", "binary"])
def test_equal_scores_are_ordered_by_id_whatever_the_write_order(tmp_path: Path, kind: str) -> None:
    """The order a cluster's shards can reproduce (each has its own rows)."""
    collection = Store(tmp_path).collection("ns", "c")
    rng = np.random.default_rng(3)
    others = rng.standard_normal((200, 16)).astype(np.float32)
    same = np.tile(rng.standard_normal(16).astype(np.float32), (5, 1))
    ids = ["e", "c", "a", "d", "b"] + [f"x{n}" for n in range(200)]
    collection.upsert(
        ids,
        np.vstack([same, others]),
        [""] * 205,
        [None] * 205,
        mode="vector",
        embedding_model=None,
    )
    collection.set_index(kind)
    assert [h.id for h in collection.search(same[0], 5)] == ["a", "b", "c", "d", "e"]
    assert [h.id for h in collection.search(same[0], 2)] == ["a", "b"]  # the tie straddles the cut
