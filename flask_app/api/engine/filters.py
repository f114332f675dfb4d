"""The filter language of spec §6 (AIP-160 flavoured), parsed with lark into
a predicate over files:

    metadata.tier IN (gold, silver) AND NOT content_type = "application/pdf"
    path = "runbooks/*" OR metadata.year >= 2024
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lark import Lark, Token, Transformer, UnexpectedInput

from flask_app.store.catalog import FileRecord

MAX_DEPTH = 16

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*  -> any_of
?and_expr: unary (_AND unary)*      -> all_of
?unary: _NOT unary                  -> negate
      | primary
?primary: "(" or_expr ")"
        | comparison
comparison: FIELD OP value                  -> compare
          | FIELD _IN "(" value ("," value)* ")" -> among
value: QUOTED | BARE
FIELD: "path" | "content_type" | "file_id" | /metadata\.[A-Za-z0-9_-]+/
OP: "!=" | "<=" | ">=" | "=" | "<" | ">"
_OR: /OR(?![A-Za-z0-9_.:\/@-])/
_AND: /AND(?![A-Za-z0-9_.:\/@-])/
_NOT: /NOT(?![A-Za-z0-9_.:\/@-])/
_IN: /IN(?![A-Za-z0-9_.:\/@-])/
QUOTED: /"(?:[^"\\]|\\["\\])*"/
BARE: /[A-Za-z0-9_.:\/@-]+/
%import common.WS
%ignore WS
"""

_PARSER = Lark(_GRAMMAR, parser="lalr", propagate_positions=True)
_NUMBER = re.compile(r"-?\d+(\.\d+)?")

Predicate = Callable[[FileRecord], bool]


class FilterError(ValueError):
    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"filter: {reason} at position {position}")
        self.position = position


def _literal(token: Token) -> tuple[Any, bool]:
    text = str(token)
    if token.type == "QUOTED":
        return re.sub(r'\\(["\\])', r"\1", text[1:-1]), True
    if _NUMBER.fullmatch(text):
        return float(text), False
    if text in ("true", "false"):
        return text == "true", False
    return text, False


def _field(record: FileRecord, name: str) -> tuple[bool, Any]:
    if name == "path":
        return True, record.path
    if name == "content_type":
        return True, record.content_type
    if name == "file_id":
        return True, record.file_id
    key = name.removeprefix("metadata.")
    if key not in record.metadata:
        return False, None
    return True, record.metadata[key]


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "string"


def _equal(have: Any, want: Any, quoted: bool, field: str) -> bool:
    if field == "path" and quoted and isinstance(want, str) and want.endswith("*"):
        return isinstance(have, str) and have.startswith(want[:-1])
    if _kind(have) != _kind(want):
        return False
    return bool(have == want)


def _order(have: Any, want: Any, op: str) -> bool:
    if _kind(have) != _kind(want) or _kind(have) == "bool":
        return False
    if op == "<":
        return bool(have < want)
    if op == "<=":
        return bool(have <= want)
    if op == ">":
        return bool(have > want)
    return bool(have >= want)


class _Build(Transformer[Token, Predicate]):
    def value(self, items: list[Token]) -> tuple[Any, bool]:
        return _literal(items[0])

    def compare(self, items: list[Any]) -> Predicate:
        field, op, (want, quoted) = str(items[0]), str(items[1]), items[2]

        def test(record: FileRecord) -> bool:
            present, have = _field(record, field)
            if op == "!=":
                return not (present and _equal(have, want, quoted, field))
            if not present:
                return False
            if op == "=":
                return _equal(have, want, quoted, field)
            return _order(have, want, op)

        return test

    def among(self, items: list[Any]) -> Predicate:
        field, values = str(items[0]), items[1:]

        def test(record: FileRecord) -> bool:
            present, have = _field(record, field)
            return present and any(_equal(have, w, q, field) for w, q in values)

        return test

    def negate(self, items: list[Predicate]) -> Predicate:
        inner = items[0]
        return lambda record: not inner(record)

    def all_of(self, items: list[Predicate]) -> Predicate:
        return lambda record: all(p(record) for p in items)

    def any_of(self, items: list[Predicate]) -> Predicate:
        return lambda record: any(p(record) for p in items)


def _depth(text: str) -> tuple[int, int]:
    """Deepest parenthesis nesting and where it is first reached."""
    depth = deepest = 0
    where = 0
    in_quotes = False
    escaped = False
    for i, ch in enumerate(text):
        if in_quotes:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_quotes = False
            continue
        if ch == '"':
            in_quotes = True
        elif ch == "(":
            depth += 1
            if depth > deepest:
                deepest, where = depth, i
        elif ch == ")":
            depth -= 1
    return deepest, where


def parse(text: str) -> Predicate | None:
    """The filter as a predicate over files (None: no filter)."""
    if not text.strip():
        return None
    deepest, where = _depth(text)
    if deepest > MAX_DEPTH:
        raise FilterError(f"nesting deeper than {MAX_DEPTH}", where)
    try:
        tree = _PARSER.parse(text)
    except UnexpectedInput as exc:
        token = getattr(exc, "token", None)
        at_end = isinstance(token, Token) and token.type == "$END"
        position = len(text) if at_end or exc.pos_in_stream is None else exc.pos_in_stream
        rest = text[position:].split()
        found = rest[0][:20] if rest else ""
        reason = f"unexpected {found!r}" if found else "unexpected end of filter"
        raise FilterError(reason, position) from None
    predicate: Predicate = _Build().transform(tree)
    return predicate
