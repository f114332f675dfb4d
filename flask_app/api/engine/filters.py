"""The filter language of spec §6 (AIP-160 flavoured), parsed with lark into
a condition on files:

    metadata.tier IN (gold, silver) AND NOT content_type = "application/pdf"
    path = "runbooks/*" OR metadata.year >= 2024
"""

from __future__ import annotations

import re
from typing import Any

from lark import Lark, Token, Transformer, UnexpectedInput

from flask_app.api.engine.errors import EngineError
from flask_app.store.file_query import (
    AllOf,
    Among,
    AnyOf,
    Compare,
    Condition,
    Literal,
    Not,
    Sql,
    to_sql,
)

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


class FilterError(EngineError):
    """A filter that does not parse: the 400 of spec §6, with its position."""

    def __init__(self, reason: str, position: int) -> None:
        message = f"filter: {reason} at position {position}"
        super().__init__(
            400, "invalid_request", message, details={"field": "filter", "position": position}
        )
        self.position = position


def _literal(token: Token) -> Literal:
    text = str(token)
    if token.type == "QUOTED":
        return Literal(re.sub(r'\\(["\\])', r"\1", text[1:-1]), True)
    if _NUMBER.fullmatch(text):
        return Literal(float(text), False)
    if text in ("true", "false"):
        return Literal(text == "true", False)
    return Literal(text, False)


class _Build(Transformer[Token, Condition]):
    def value(self, items: list[Token]) -> Literal:
        return _literal(items[0])

    def compare(self, items: list[Any]) -> Condition:
        return Compare(str(items[0]), str(items[1]), items[2])

    def among(self, items: list[Any]) -> Condition:
        return Among(str(items[0]), tuple(items[1:]))

    def negate(self, items: list[Condition]) -> Condition:
        return Not(items[0])

    def all_of(self, items: list[Condition]) -> Condition:
        return AllOf(tuple(items))

    def any_of(self, items: list[Condition]) -> Condition:
        return AnyOf(tuple(items))


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


def parse(text: str) -> Condition | None:
    """The filter as a condition on files (None: no filter); the catalog
    runs it through its metadata index (`store.file_query`)."""
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
    condition: Condition = _Build().transform(tree)
    return condition


def filter_condition(namespace: str, collection: str, text: str | None) -> Sql | None:
    """The request's filter as SQL on one collection's files; a parse error
    is the 400 of spec §6."""
    condition = parse(text or "")
    return None if condition is None else to_sql(condition, namespace, collection)
