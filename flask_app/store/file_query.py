"""Conditions on a collection's files, compiled to SQL over the catalog's
indexes: `file_metadata` (one row per metadata key, indexed by collection,
key, kind and value) and `file_principals`. A positive comparison is a lookup
of the matching file ids, so the cost of a filter follows its matches; `NOT`
and `!=` are set differences.

Semantics (Engine spec §6): numbers compare numerically, strings by code
point, booleans only by `=`/`!=`; values of different kinds are never equal
and never ordered; a missing key makes every comparison but `!=` false;
`path` with a quoted value ending in `*` matches by prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BUILT_IN_FIELDS = {"path": "f.path", "content_type": "f.content_type", "file_id": "f.file_id"}
ORDERINGS = ("<", "<=", ">", ">=")


@dataclass(frozen=True)
class Literal:
    value: str | float | bool
    quoted: bool

    @property
    def kind(self) -> str:
        if isinstance(self.value, bool):
            return "bool"
        if isinstance(self.value, float):
            return "number"
        return "string"

    def sql_value(self) -> Any:
        if isinstance(self.value, bool):
            return int(self.value)
        if isinstance(self.value, float) and self.value.is_integer():
            return int(self.value)  # an exact INTEGER compares exactly with stored integers
        return self.value


@dataclass(frozen=True)
class Compare:
    field: str  # "path", "content_type", "file_id" or "metadata.<key>"
    op: str  # = != < <= > >=
    value: Literal


@dataclass(frozen=True)
class Among:
    field: str
    values: tuple[Literal, ...]


@dataclass(frozen=True)
class Not:
    inner: Condition


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Condition, ...]


Condition = Compare | Among | Not | AllOf | AnyOf


@dataclass(frozen=True)
class Sql:
    """A condition on the catalog's `files f` row of one collection."""

    text: str
    params: tuple[Any, ...]


_FALSE = Sql("0", ())
_TRUE = Sql("1", ())


def to_sql(condition: Condition, namespace: str, collection: str) -> Sql:
    return _Compiler(namespace, collection).compile(condition)


def readable_by(principals: list[str], namespace: str, collection: str) -> Sql:
    """Files that list at least one of `principals`."""
    marks = ", ".join("?" for _ in principals)
    return Sql(
        "f.file_id IN (SELECT file_id FROM file_principals WHERE namespace = ? "
        f"AND collection = ? AND principal IN ({marks}))",
        (namespace, collection, *principals),
    )


class _Compiler:
    def __init__(self, namespace: str, collection: str) -> None:
        self.scope = (namespace, collection)

    def compile(self, node: Condition) -> Sql:
        if isinstance(node, Compare):
            if node.op == "!=":
                return self._negate(self._equal(node.field, node.value))
            if node.op == "=":
                return self._equal(node.field, node.value)
            return self._ordered(node.field, node.op, node.value)
        if isinstance(node, Among):
            return self._join([self._equal(node.field, v) for v in node.values], "OR")
        if isinstance(node, Not):
            return self._negate(self.compile(node.inner))
        if isinstance(node, AllOf):
            return self._join([self.compile(p) for p in node.parts], "AND")
        return self._join([self.compile(p) for p in node.parts], "OR")

    def _equal(self, field: str, literal: Literal) -> Sql:
        if field in BUILT_IN_FIELDS:
            if literal.kind != "string":
                return _FALSE
            column = BUILT_IN_FIELDS[field]
            text = str(literal.value)
            if field == "path" and literal.quoted and text.endswith("*"):
                return _prefix(column, text[:-1])
            return Sql(f"{column} = ?", (text,))
        return self._metadata(field, "=", literal)

    def _ordered(self, field: str, op: str, literal: Literal) -> Sql:
        if literal.kind == "bool":
            return _FALSE
        if field in BUILT_IN_FIELDS:
            if literal.kind != "string":
                return _FALSE
            return Sql(f"{BUILT_IN_FIELDS[field]} {op} ?", (literal.value,))
        return self._metadata(field, op, literal)

    def _metadata(self, field: str, op: str, literal: Literal) -> Sql:
        key = field.removeprefix("metadata.")
        return Sql(
            "f.file_id IN (SELECT file_id FROM file_metadata WHERE namespace = ? "
            f"AND collection = ? AND key = ? AND kind = ? AND value {op} ?)",
            (*self.scope, key, literal.kind, literal.sql_value()),
        )

    @staticmethod
    def _negate(inner: Sql) -> Sql:
        return Sql(f"NOT ({inner.text})", inner.params)

    @staticmethod
    def _join(parts: list[Sql], op: str) -> Sql:
        return Sql(
            "(" + f" {op} ".join(p.text for p in parts) + ")",
            tuple(param for p in parts for param in p.params),
        )


def _prefix(column: str, prefix: str) -> Sql:
    """Strings starting with `prefix`: the index range [prefix, successor).
    (Code point order is UTF-8 byte order, SQLite's BINARY collation.)"""
    if not prefix:
        return _TRUE
    last = ord(prefix[-1])
    if last == 0x10FFFF or 0xD7FF <= last < 0xE000:
        return Sql(f"substr({column}, 1, ?) = ?", (len(prefix), prefix))
    successor = prefix[:-1] + chr(last + 1)
    return Sql(f"({column} >= ? AND {column} < ?)", (prefix, successor))
