"""An upsert's index append runs beside its SQLite row writes and beside
searches: the rows are written while the index waits for the disk, searches
go on without seeing the batch, the batch becomes visible with its rows'
commit, and a failed row write undoes the batch only after the append is
done."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flask_app import simcore
from flask_app.store import Collection, DuplicateIds
from flask_app.store import collection_writes as collection_module

DIM = 16


def vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


class HeldAppend:
    """An index whose appends wait for `release` (after `delay` seconds when set)."""

    def __init__(self, index: simcore.Index, delay: float | None = None) -> None:
        self.index, self.delay = index, delay
        self.started, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.index, name)

    def __contains__(self, item_id: str) -> bool:
        return item_id in self.index

    def stage_upsert(self, ids: list[str], rows: np.ndarray) -> None:
        self.started.set()
        if self.delay is not None:
            time.sleep(self.delay)
        elif not self.release.wait(30):
            raise TimeoutError("never released")
        self.index.stage_upsert(ids, rows)


def held(c: Collection, delay: float | None = None) -> HeldAppend:
    assert c._index is not None
    wrapper = HeldAppend(c._index, delay)
    c._index = wrapper  # type: ignore[assignment]
    return wrapper


def committed_items(path: Path) -> int:
    db = sqlite3.connect(path / "rows.sqlite")
    try:
        return int(db.execute("SELECT count(*) FROM items").fetchone()[0])
    finally:
        db.close()


def test_rows_are_written_during_the_append_and_commit_after_it(tmp_path: Path) -> None:
    c = Collection(tmp_path / "c")
    c.upsert(["a"], vectors(1, 0), ["t"], [None], mode="vector", embedding_model=None)
    index = held(c)
    statements: list[str] = []

    def write() -> None:
        c._db().set_trace_callback(statements.append)  # this thread's connection
        c.upsert(
            ["b", "c"], vectors(2, 1), ["t", "u"], [None, None], mode="vector", embedding_model=None
        )

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert index.started.wait(10)
        deadline = time.monotonic() + 10
        while not any("INSERT INTO items" in s for s in statements):
            assert time.monotonic() < deadline, "rows were not written while the index appended"
            time.sleep(0.01)
        time.sleep(0.2)  # time to commit, were it not waiting for the append
        assert committed_items(c.path) == 1
    finally:
        index.release.set()
        writer.join(30)
    assert not writer.is_alive()
    assert committed_items(c.path) == 3 and len(c) == 3
    assert "b" in index and "c" in index


def test_searches_go_on_during_the_append_and_see_the_batch_only_with_its_rows(
    tmp_path: Path,
) -> None:
    """A search used to wait for the whole write (224 ms p50 while 20,000-row
    batches were written; benches/search/search_during_upload.py)."""
    c = Collection(tmp_path / "c")
    c.upsert(["a"], vectors(1, 0), ["t"], [None], mode="vector", embedding_model=None)
    index = held(c)
    batch = vectors(2, 1)
    writer = threading.Thread(
        target=lambda: c.upsert(
            ["b", "c"], batch, ["t", "u"], [None, None], mode="vector", embedding_model=None
        )
    )
    writer.start()
    try:
        assert index.started.wait(10)
        seen: list[list[str]] = []

        def search() -> None:
            for _ in range(5):
                seen.append([h.id for h in c.search(batch[0], 3)] + [str(len(c))])

        searcher = threading.Thread(target=search)
        searcher.start()
        searcher.join(5)  # answered while the append is held (up to 30 s)
        assert not searcher.is_alive(), "searches waited for the write"
        assert seen == [["a", "1"]] * 5
    finally:
        index.release.set()
        writer.join(30)
    assert not writer.is_alive() and len(c) == 3
    assert c.search(batch[0], 1)[0].id == "b" and not index.has_staged


def test_a_failed_row_write_undoes_the_batch_after_its_append_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Undoing before a slow append lands would leave the batch in the index."""
    c = Collection(tmp_path / "c")
    c.upsert(["a"], vectors(1, 0), ["t"], [None], mode="vector", embedding_model=None)
    index = held(c, delay=0.3)

    def broken(*_: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(collection_module, "index_text", broken)
    with pytest.raises(sqlite3.OperationalError):
        c.upsert(["b"], vectors(1, 1), ["t"], [None], mode="vector", embedding_model=None)
    assert index.started.is_set()
    time.sleep(0.5)  # past the slow append, had the undo not waited for it
    assert "b" not in index and "a" in index
    assert len(c) == 1 and committed_items(c.path) == 1

    monkeypatch.undo()
    c.upsert(["b"], vectors(1, 2), ["t"], [None], mode="vector", embedding_model=None)
    c.close()
    reopened = Collection(tmp_path / "c")
    assert len(reopened) == 2
    assert reopened._index is not None and len(reopened._index) == 2
    stored = reopened._index.get("b")
    assert stored is not None
    assert np.allclose(stored, vectors(1, 2)[0] / np.linalg.norm(vectors(1, 2)))


def test_a_batch_naming_an_id_twice_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    c = Collection(tmp_path / "c")
    c.upsert(["a"], vectors(1, 0), ["t"], [None], mode="vector", embedding_model=None)
    with pytest.raises(DuplicateIds, match="'b' appears more than once"):
        c.upsert(
            ["b", "b"], vectors(2, 1), ["t", "u"], [None, None], mode="vector", embedding_model=None
        )
    assert len(c) == 1 and committed_items(c.path) == 1
    assert c.search(vectors(1, 0)[0], 5)[0].id == "a"
