"""The names the core accepts for namespaces, collections and principals
(every surface validates against these, in its own error shape)."""

from __future__ import annotations

import re

NAME_PATTERN = "^[a-z0-9][a-z0-9-]{0,62}$"
NAME = re.compile(NAME_PATTERN[1:-1])
# "<kind>:<id>" without whitespace; the whitespace is spelled out (JSON
# Schema's \s, which differs from Python's) so the OpenAPI pattern and this
# check accept the same strings
_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
PRINCIPAL_PATTERN = f"^[^:{_SPACE}]+:[^{_SPACE}]+$"
PRINCIPAL = re.compile(PRINCIPAL_PATTERN[1:-1])
PRINCIPALS_MAX = 100
PRINCIPAL_MAX = 256


def split_qualified(qualified: str) -> tuple[str, str] | None:
    """("namespace", "collection") from "namespace/collection" (None when it is not one)."""
    ns, slash, name = qualified.partition("/")
    if not slash or not (NAME.fullmatch(ns) and NAME.fullmatch(name)):
        return None
    return ns, name
