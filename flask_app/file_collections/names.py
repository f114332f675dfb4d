"""The names the core accepts for namespaces, collections and principals
(every surface validates against these, in its own error shape)."""

from __future__ import annotations

import re

NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
NAME_PATTERN = "^[a-z0-9][a-z0-9-]{0,62}$"
PRINCIPAL = re.compile(r"[^:\s]+:\S+")
PRINCIPALS_MAX = 100
PRINCIPAL_MAX = 256


def split_qualified(qualified: str) -> tuple[str, str] | None:
    """("namespace", "collection") from "namespace/collection" (None when it is not one)."""
    ns, slash, name = qualified.partition("/")
    if not slash or not (NAME.fullmatch(ns) and NAME.fullmatch(name)):
        return None
    return ns, name
