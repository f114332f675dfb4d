"""How a collection's searches scan its vectors (its "index kind")."""

from __future__ import annotations

from typing import Literal, get_args

IndexKind = Literal["f32", "int8", "binary"]

# (simcore mode, candidates kept per result for the exact f32 rescoring).
# int8 and binary trade recall for speed; their oversampling gives
# recall@10 >= 0.95 on real text at 1M x 384 (benches/search/binary_codes.py).
INDEX_KINDS: dict[str, tuple[str, int]] = {
    "f32": ("exact", 1),
    "int8": ("int8", 4),
    "binary": ("binary", 40),
}
DEFAULT_INDEX: IndexKind = "f32"
assert tuple(INDEX_KINDS) == get_args(IndexKind)
