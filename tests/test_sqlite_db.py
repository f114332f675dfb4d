"""The one way to SQLite (flask_app/store/sqlite_db.py): transactions that
never stay open after a failed COMMIT, numbered migrations applied in order
at open, and data directories of the last release without numbered
migrations opened and migrated forward (tests/fixtures/data_dir_0, written by
scripts/make_data_dir_fixture.py with that release's code)."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from flask_app.rag.memory import MEMORY_SCHEMA, Conversations, Turn
from flask_app.store import Collection, Store, StoreError, sqlite_db
from flask_app.store.catalog import CATALOG_SCHEMA, Catalog
from flask_app.store.collection import ROWS_SCHEMA
from flask_app.store.job_table import JOBS_SCHEMA, JobTable
from flask_app.store.sqlite_db import Database, Schema
from tests.stores import deny_commit

FIXTURE = Path(__file__).parent / "fixtures" / "data_dir_0"


def test_statements_keeps_a_trigger_whole() -> None:
    parts = sqlite_db.statements(
        "CREATE TABLE a (x);\nCREATE TRIGGER t AFTER INSERT ON a BEGIN\n"
        "  INSERT INTO a VALUES (1);\n  DELETE FROM a;\nEND;\nCREATE INDEX i ON a (x);\n"
    )
    assert len(parts) == 3 and parts[1].startswith("CREATE TRIGGER") and parts[1].endswith("END;")
    with pytest.raises(ValueError, match="incomplete"):
        sqlite_db.statements("CREATE TABLE a (x)")


def _counting(log: list[int], n: int) -> Callable[[sqlite3.Connection], None]:
    def run(db: sqlite3.Connection) -> None:
        log.append(n)
        db.execute(f"CREATE TABLE t{n} (x)")

    return run


def test_migrations_run_in_order_once_and_record_the_version(tmp_path: Path) -> None:
    log: list[int] = []
    schema = Schema("test", (_counting(log, 1), _counting(log, 2)))
    assert Database(tmp_path / "x.db", schema).migrations_run == 2
    assert log == [1, 2]
    grown = Schema("test", (*schema.migrations, _counting(log, 3)))
    db = Database(tmp_path / "x.db", grown)
    assert db.migrations_run == 1 and log == [1, 2, 3]
    assert sqlite_db.user_version(db.connection()) == 3
    assert Database(tmp_path / "x.db", grown).migrations_run == 0


def test_a_failed_migration_changes_nothing(tmp_path: Path) -> None:
    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half (x)")
        raise RuntimeError("migration 2 failed")

    with pytest.raises(RuntimeError):
        Database(tmp_path / "x.db", Schema("test", (_counting([], 1), broken)))
    db = sqlite3.connect(tmp_path / "x.db")
    assert sqlite_db.user_version(db) == 1
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half'").fetchone()[0] == 0


def test_a_file_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    Database(tmp_path / "x.db", Schema("test", (_counting([], 1), _counting([], 2))))
    with pytest.raises(StoreError, match="newer edgerag"):
        Database(tmp_path / "x.db", Schema("test", (_counting([], 1),)))


def test_a_failed_commit_rolls_back_and_surfaces(tmp_path: Path) -> None:
    db = Database(tmp_path / "x.db", Schema("test", (sqlite_db.script("CREATE TABLE t (x);"),)))
    conn = db.connection()
    conn.set_authorizer(deny_commit)
    with pytest.raises(sqlite3.DatabaseError), db.transaction() as tx:
        tx.execute("INSERT INTO t VALUES (1)")
    conn.set_authorizer(None)
    assert not conn.in_transaction
    with db.transaction() as tx:
        tx.execute("INSERT INTO t VALUES (2)")
    assert [r[0] for r in sqlite3.connect(tmp_path / "x.db").execute("SELECT x FROM t")] == [2]


def test_the_catalogs_failed_commit_leaves_no_transaction_open(tmp_path: Path) -> None:
    # the catalog committed outside its `try`: a failed COMMIT left the
    # thread's connection inside the transaction, and its next write failed
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    conn = catalog._db()
    conn.set_authorizer(deny_commit)
    with pytest.raises(sqlite3.DatabaseError):
        catalog.put_namespace("lost")
    conn.set_authorizer(None)
    assert not conn.in_transaction
    catalog.put_namespace("kept")
    assert [n.name for n in catalog.namespaces(10)] == ["kept"]


def test_memory_and_job_tables_roll_back_a_failed_commit(tmp_path: Path) -> None:
    memory = Conversations(tmp_path / "m.sqlite3")
    jobs = JobTable(tmp_path / "j.sqlite3")
    for db in (memory._sqlite, jobs._sqlite):
        db.connection().set_authorizer(deny_commit)
    with pytest.raises(sqlite3.DatabaseError):
        memory.append("m", [Turn("q", "r", "a")])
    with pytest.raises(sqlite3.DatabaseError):
        jobs.add("j1", "rag", {}, "")
    for db in (memory._sqlite, jobs._sqlite):
        db.connection().set_authorizer(None)
        assert not db.connection().in_transaction
    assert memory.turns("m") == []
    assert jobs.read("j1", "") is None
    jobs.add("j2", "rag", {}, "")
    assert jobs.read("j2", "") is not None


def _copy_fixture(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(FIXTURE, data)
    return data


@pytest.mark.parametrize(
    ("file", "schema", "before"),
    [
        ("_edge/store/rows.sqlite", ROWS_SCHEMA, 0),
        ("catalog.sqlite3", CATALOG_SCHEMA, 1),
        ("conversations.sqlite3", MEMORY_SCHEMA, 0),
        ("jobs.sqlite3", JOBS_SCHEMA, 0),
        ("research_runs.sqlite3", JOBS_SCHEMA, 0),
    ],
)
def test_the_fixture_is_what_the_last_unnumbered_release_wrote(
    file: str, schema: Schema, before: int
) -> None:
    db = sqlite3.connect(f"file:{FIXTURE / file}?mode=ro", uri=True)
    assert sqlite_db.user_version(db) == before < schema.version


def test_a_data_dir_of_the_last_release_opens_and_migrates_forward(tmp_path: Path) -> None:
    data = _copy_fixture(tmp_path)
    store = Store(data)
    edge = store.edge()
    assert len(edge) == 3
    hits = edge.search(np.eye(8, dtype=np.float32)[1], 1)
    assert [h.id for h in hits] == ["kiosk"]
    assert [i for i, _ in edge.lexical_search(["ferry"], 5)] == ["ferry"]
    store.close()

    catalog = Catalog(data / "catalog.sqlite3")
    (notices,) = catalog.files("town", "notices", limit=10, after=None)
    assert notices.path == "notices.txt" and notices.status == "ready"
    assert catalog.spans_of([notices.file_id]) == {notices.file_id: [(0, 31), (33, 66)]}
    assert catalog.claim_pending() is None
    memory = Conversations(data / "conversations.sqlite3", ttl_s=1e9)
    (turn,) = memory.turns("0b7f3c52-5d7e-4f0e-9a51-2f8f0c3d9e11")
    assert turn.question == "Who runs the kiosk?" and turn.sources == ["kiosk"]
    for name in ("jobs", "research_runs"):
        job = JobTable(data / f"{name}.sqlite3").read(f"{name}-1", "")
        assert job is not None and job.payload == {"question": "When does the ferry leave?"}

    for file, schema in [
        ("_edge/store/rows.sqlite", ROWS_SCHEMA),
        ("catalog.sqlite3", CATALOG_SCHEMA),
        ("conversations.sqlite3", MEMORY_SCHEMA),
        ("jobs.sqlite3", JOBS_SCHEMA),
    ]:
        assert sqlite_db.user_version(sqlite3.connect(data / file)) == schema.version
    rows = sqlite3.connect(data / "_edge" / "store" / "rows.sqlite")
    assert rows.execute("SELECT count(*) FROM settings WHERE key = 'fts'").fetchone()[0] == 0


def test_a_collection_without_the_text_index_gets_it_once(tmp_path: Path) -> None:
    data = _copy_fixture(tmp_path)
    rows = sqlite3.connect(data / "_edge" / "store" / "rows.sqlite")
    rows.execute("DELETE FROM items_fts")
    rows.execute("DELETE FROM fts_rows")
    rows.execute("DELETE FROM settings WHERE key = 'fts'")
    rows.commit()
    rows.close()
    edge = Collection(data / "_edge" / "store")
    assert [i for i, _ in edge.lexical_search(["parking"], 5)] == ["parking"]
    edge.close()
    again = Collection(data / "_edge" / "store")
    assert again._db().execute("SELECT count(*) FROM fts_rows").fetchone()[0] == 3
