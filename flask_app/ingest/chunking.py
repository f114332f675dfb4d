"""Cut extracted text into passages with exact code-point spans: paragraphs
(blank-line separated) merged up to `target` characters, a longer paragraph
cut before a list item (an option of an option table, a bullet), else at
sentence ends, else at spaces. `text[start:end]` is always the chunk."""

from __future__ import annotations

import re
from dataclasses import dataclass

from flask_app.rag.text import ITEM_START

_PARAGRAPH = re.compile(r"\n\s*\n|\f")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_LINE_START = re.compile(r"(?<=\n)")


@dataclass(frozen=True)
class Chunk:
    start: int
    end: int
    text: str


def _paragraphs(text: str) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for m in _PARAGRAPH.finditer(text):
        spans.append((pos, m.start()))
        pos = m.end()
    spans.append((pos, len(text)))
    out = []
    for lo, hi in spans:
        piece = text[lo:hi]
        stripped = piece.strip()
        if stripped:
            lo += len(piece) - len(piece.lstrip())
            out.append((lo, lo + len(stripped)))
    return out


def _split_long(text: str, lo: int, hi: int, limit: int) -> list[tuple[int, int]]:
    """Cut [lo, hi) into pieces of at most `limit` characters before a line
    that starts a list item, else at sentence ends, else at spaces, else hard."""
    out = []
    while hi - lo > limit:
        window = text[lo : lo + limit]
        cut = max(
            (m.end() for m in _LINE_START.finditer(window) if ITEM_START.match(window, m.end())),
            default=0,
        )
        if cut < limit // 3:
            cut = max((m.end() for m in _SENTENCE_END.finditer(window)), default=0)
        if cut < limit // 3:
            cut = window.rfind(" ") + 1
        if cut <= 0:
            cut = limit
        piece = text[lo : lo + cut].rstrip()
        out.append((lo, lo + len(piece)))
        lo += cut
        while lo < hi and text[lo].isspace():
            lo += 1
    if hi > lo:
        out.append((lo, hi))
    return out


def chunk(text: str, target: int = 700) -> list[Chunk]:
    pieces: list[tuple[int, int]] = []
    for lo, hi in _paragraphs(text):
        pieces += _split_long(text, lo, hi, target) if hi - lo > target else [(lo, hi)]
    merged: list[tuple[int, int]] = []
    for lo, hi in pieces:
        if merged and hi - merged[-1][0] <= target and "\f" not in text[merged[-1][1] : lo]:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return [Chunk(lo, hi, text[lo:hi]) for lo, hi in merged]
