"""Work claimed from a shared table is held by one worker until its lease
runs out: files to ingest (the catalog) and async jobs (a job table)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flask_app.store import catalog as catalog_module
from flask_app.store.catalog import Catalog
from flask_app.store.job_table import CANCELLED, JobTable


def test_a_file_is_claimed_once_until_its_lease_runs_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog_module, "INGEST_LEASE_S", 0.3)
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    first, _ = catalog.add_file("ns", "c", "a.md", "text/markdown", b"a", {}, [])
    second, _ = catalog.add_file("ns", "c", "b.md", "text/markdown", b"b", {}, [])
    assert catalog.claim_pending() == first.file_id
    assert catalog.claim_pending() == second.file_id  # the first is held
    assert catalog.claim_pending() is None
    time.sleep(0.2)
    catalog.progress(first.file_id, 1)  # progress renews the first one's lease
    time.sleep(0.2)
    assert catalog.claim_pending() == second.file_id  # its worker went quiet
    assert catalog.finish(second.file_id)
    catalog.release_claims()  # a restarted server takes back what it held
    assert catalog.claim_pending() == first.file_id


def test_a_catalog_from_before_claims_gains_the_lease_column(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite3"
    old = Catalog(path)
    record, _ = old.add_file("ns", "c", "a.md", "text/markdown", b"a", {}, [])
    with old._tx() as db:
        db.execute("ALTER TABLE files DROP COLUMN lease_until")
        db.execute("PRAGMA user_version = 1")  # as the releases before claims left it
    old.close()
    assert Catalog(path).claim_pending() == record.file_id


def test_a_job_is_claimed_by_one_worker_and_released_or_cancelled(tmp_path: Path) -> None:
    table = JobTable(tmp_path / "jobs.sqlite3")
    table.add("j1", "k", {"n": 1}, "alice")
    table.add("j2", "k", {"n": 2}, "alice")
    claimed = table.claim("w1", lease_s=30)
    assert claimed is not None and claimed.id == "j1" and claimed.payload == {"n": 1}
    found = table.read("j1", "alice")
    assert found is not None and found.running
    assert table.claim("w2", lease_s=30).id == "j2"  # type: ignore[union-attr]
    assert table.claim("w3", lease_s=30) is None
    # a held job asked to stop: flagged for its worker, which sees it on renewing
    assert table.cancel("j1", "mallory") is None
    assert table.cancel("j1", "alice").status == "SUBMITTED"  # type: ignore[union-attr]
    assert table.renew("j1", "w1", lease_s=30) is True
    table.finish("j1", {"done": True}, None)
    assert table.read("j1", "alice").status == CANCELLED  # type: ignore[union-attr]
    # a job given back is claimable again at once
    table.release("j2", "w2")
    assert table.claim("w3", lease_s=0.01).id == "j2"  # type: ignore[union-attr]
    time.sleep(0.05)
    assert table.claim("w4", lease_s=30).id == "j2"  # type: ignore[union-attr]
    table.release_all()
    assert table.read("j2", "alice").running is False  # type: ignore[union-attr]
