"""The Engine filter (spec §6) run as SQL over the catalog's metadata index,
checked against a direct reading of the spec's semantics on random files and
random filters; the index drives positive lookups; old catalogs are indexed
when opened."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flask_app.api.engine.filters import parse
from flask_app.store.catalog import Catalog, FileRecord
from flask_app.store.file_query import (
    AllOf,
    Among,
    AnyOf,
    Compare,
    Condition,
    Literal,
    Not,
    readable_by,
    to_sql,
)

KEYS = ("env", "year", "public", "tier")
STRINGS = ("prod", "staging", "a", "b", "Z", "é", "10")
NUMBERS = (-1, 0, 2023, 2024, 2024.5, 10)


# --- the spec, read directly ----------------------------------------------------


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else "string"


def _present(record: FileRecord, field: str) -> tuple[bool, Any]:
    if field in ("path", "content_type", "file_id"):
        return True, getattr(record, field)
    key = field.removeprefix("metadata.")
    return key in record.metadata, record.metadata.get(key)


def _equal(have: Any, want: Literal, field: str) -> bool:
    if field == "path" and want.quoted and str(want.value).endswith("*"):
        return str(have).startswith(str(want.value)[:-1])
    return _kind(have) == want.kind and bool(have == want.value)


def oracle(node: Condition, record: FileRecord) -> bool:
    if isinstance(node, Compare):
        present, have = _present(record, node.field)
        if node.op == "!=":
            return not (present and _equal(have, node.value, node.field))
        if not present:
            return False
        if node.op == "=":
            return _equal(have, node.value, node.field)
        if _kind(have) != node.value.kind or node.value.kind == "bool":
            return False
        want = node.value.value
        return bool(
            {
                "<": have < want,
                "<=": have <= want,
                ">": have > want,
                ">=": have >= want,
            }[node.op]
        )
    if isinstance(node, Among):
        present, have = _present(record, node.field)
        return present and any(_equal(have, v, node.field) for v in node.values)
    if isinstance(node, Not):
        return not oracle(node.inner, record)
    if isinstance(node, AllOf):
        return all(oracle(p, record) for p in node.parts)
    assert isinstance(node, AnyOf)
    return any(oracle(p, record) for p in node.parts)


# --- generators --------------------------------------------------------------------

metadata_values = st.sampled_from(STRINGS) | st.sampled_from(NUMBERS) | st.booleans()
files = st.lists(
    st.tuples(
        st.sampled_from(("runbooks/a.md", "runbooks/b.md", "notes/x.md", "run", "ünï/z.md")),
        st.dictionaries(st.sampled_from(KEYS), metadata_values, max_size=4),
    ),
    min_size=1,
    max_size=8,
)


def _value_text(value: Any, quoted: bool) -> str:
    bare_safe = re.fullmatch(r"[A-Za-z0-9_.:/@-]+", str(value)) is not None
    if quoted or (isinstance(value, str) and not bare_safe):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


comparisons = st.builds(
    lambda field, op, value, quoted: f"{field} {op} {_value_text(value, quoted)}",
    st.sampled_from(("path", "content_type", *(f"metadata.{k}" for k in KEYS))),
    st.sampled_from(("=", "!=", "<", "<=", ">", ">=")),
    metadata_values | st.sampled_from(("runbooks/*", "run*", "*", "text/markdown")),
    st.booleans(),
) | st.builds(
    lambda key, values: f"metadata.{key} IN ({', '.join(_value_text(v, False) for v in values)})",
    st.sampled_from(KEYS),
    st.lists(metadata_values, min_size=1, max_size=3),
)
filters = st.recursive(
    comparisons,
    lambda inner: (
        st.builds(lambda a, b: f"{a} AND {b}", inner, inner)
        | st.builds(lambda a, b: f"{a} OR {b}", inner, inner)
        | st.builds(lambda a: f"NOT {a}", inner)
        | st.builds(lambda a: f"({a})", inner)
    ),
    max_leaves=5,
)


def _catalog(tmp_path: Path, rows: list[tuple[str, dict[str, Any]]]) -> Catalog:
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    catalog.put_namespace("ops")
    catalog.put_collection("ops", "docs", description="", access_control="open")
    for path, metadata in rows:
        record, _ = catalog.add_file("ops", "docs", path, "text/markdown", b"x", metadata, [])
        catalog.finish(record.file_id)
    return catalog


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=files, text=filters)
def test_sql_matches_the_spec_semantics(tmp_path_factory: Any, rows: Any, text: str) -> None:
    catalog = _catalog(tmp_path_factory.mktemp("c"), rows)
    try:
        condition = parse(text)
        assert condition is not None
        everything = catalog.files_where("ops", "docs")
        want = {r.file_id for r in everything if oracle(condition, r)}
        got = catalog.files_where("ops", "docs", [to_sql(condition, "ops", "docs")])
        assert {r.file_id for r in got} == want, text
    finally:
        catalog.close()


def test_metadata_lookups_use_the_index(tmp_path: Path) -> None:
    catalog = _catalog(
        tmp_path, [(f"f{i}.md", {"env": "prod" if i % 50 else "staging"}) for i in range(200)]
    )
    condition = parse("metadata.env = staging")
    assert condition is not None
    sql = to_sql(condition, "ops", "docs")
    plan = " ".join(
        str(row[-1])
        for row in catalog._db().execute(
            "EXPLAIN QUERY PLAN SELECT f.file_id FROM files f WHERE f.namespace = ? "
            f"AND f.collection = ? AND {sql.text}",
            ("ops", "docs", *sql.params),
        )
    )
    assert "file_metadata_value" in plan, plan
    assert len(catalog.files_where("ops", "docs", [sql])) == 4


def test_principals_and_deletes_keep_the_index(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, [])
    a, _ = catalog.add_file("ops", "docs", "a.md", "text/plain", b"x", {"k": 1}, ["group:x"])
    b, _ = catalog.add_file("ops", "docs", "b.md", "text/plain", b"x", {"k": 1}, ["group:y"])
    for record in (a, b):
        catalog.finish(record.file_id)
    readable = catalog.files_where("ops", "docs", [readable_by(["group:y"], "ops", "docs")])
    assert [r.file_id for r in readable] == [b.file_id]
    # replacing a path and deleting a file drop their index rows
    c, replaced = catalog.add_file("ops", "docs", "b.md", "text/plain", b"y", {"k": 2}, [])
    assert replaced == b.file_id
    catalog.delete_file(a.file_id)
    rows = catalog._db().execute("SELECT file_id, key, value FROM file_metadata").fetchall()
    assert rows == [(c.file_id, "k", 2)]
    assert catalog._db().execute("SELECT count(*) FROM file_principals").fetchone() == (0,)


def test_a_catalog_from_before_the_index_is_indexed_when_opened(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, [("a.md", {"env": "prod"}), ("b.md", {"env": "dev"})])
    catalog.close()
    db = sqlite3.connect(tmp_path / "catalog.sqlite3")
    db.executescript(
        "DELETE FROM file_metadata; DROP TRIGGER files_indexed; PRAGMA user_version = 0;"
    )
    db.close()
    reopened = Catalog(tmp_path / "catalog.sqlite3")
    condition = parse("metadata.env = dev")
    assert condition is not None
    got = reopened.files_where("ops", "docs", [to_sql(condition, "ops", "docs")])
    assert [r.path for r in got] == ["b.md"]
    # the trigger is back for new files
    record, _ = reopened.add_file("ops", "docs", "c.md", "text/plain", b"x", {"env": "dev"}, [])
    reopened.finish(record.file_id)
    assert len(reopened.files_where("ops", "docs", [to_sql(condition, "ops", "docs")])) == 2
    reopened.close()
