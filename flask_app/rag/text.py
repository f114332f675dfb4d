"""Words and sentences: the small amount of text handling retrieval and
evidence selection need (no language model involved)."""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

import snowballstemmer

# Function words that carry no topic: they neither retrieve nor support an answer.
STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing done down during
    each else few for from further given had has have having he her here hers him his how i
    if in into is it its itself just like may me might more most must my no nor not now of
    off on once only or other our ours out over own same shall she should so some such than
    that the their them then there these they this those through to too under until up upon
    us very was we were what when where which while who whom whose why will with would you
    your yours according article called does mean means named say says said tell text
    document documents much many long often
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

_WORD = re.compile(r"[^\W_]+(?:[._:-][^\W_]+)*", re.UNICODE)
_PARAGRAPH = re.compile(r"\S[^\n]*(?:\n(?!\s*\n)[^\n]*)*")  # lines up to a blank line
# A sentence ends at . ! ? followed by space and an upper-case letter, digit, quote or bracket.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9*])")


def words(text: str) -> list[str]:
    """Lower-cased words; dotted and hyphenated tokens (str.zfill, utf-8, 3.9) stay whole."""
    return [w.lower() for w in _WORD.findall(text)]


# A model or product code: a word of letters, then a digit ("P5", "AX3000",
# "IPX7"); a plural "s" right after a digit is left out of the group.
_CODE = re.compile(r"\b([a-z]+\d[a-z\d]*?)(?:(?<=\d)s)?\b")


def codes(text: str) -> set[str]:
    """The model or product codes `text` names ("the P3s", "AX3000's"),
    lower-cased: what tells one product's passage from its sibling's when
    the words around are the same."""
    return set(_CODE.findall(text.lower().replace("_", " ")))


def leading_code(text: str) -> str | None:
    """The first code `text` names: the product a sheet is about ("Pulse P5
    earbuds. Rated IPX7…" → "p5"), where a later code is often a feature."""
    found = _CODE.search(text.lower().replace("_", " "))
    return found.group(1) if found else None


_STEMMER = snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The English Snowball (Porter 2) stem, so that "closes", "closed" and
    "close" meet, as they do in the full-text index."""
    return str(_STEMMER.stemWord(word))


def terms(text: str) -> list[str]:
    """Content words of `text`, stemmed, in order, without repeats."""
    out: list[str] = []
    for w in words(text):
        if w in STOPWORDS:
            continue
        s = stem(w)
        if s not in out:
            out.append(s)
    return out


def term_set(text: str) -> set[str]:
    """Every stemmed word of `text`, and the parts of dotted/hyphenated ones."""
    out: set[str] = set()
    for w in words(text):
        out.add(stem(w))
        for part in re.split(r"[._:-]", w):
            if part:
                out.add(stem(part))
    return out


@dataclass(frozen=True)
class Unit:
    """A sentence or line of a passage: `text` is `passage[start:end]`."""

    start: int
    end: int
    text: str


# A line that starts a list item: a bullet, "1." / "1)", or a command-line option.
ITEM_START = re.compile(r"[ \t]*(?:[-*+\u2022][ \t]|\d+[.)][ \t]|--?[A-Za-z0-9])")


def _line_items(passage: str, lo: int, hi: int) -> list[tuple[int, int]]:
    """The items of a list-like paragraph (option tables, bullet lists): each
    line that starts an item, with the lines that continue it. Fewer than two
    items: [] (prose, even hard-wrapped, stays whole)."""
    starts = [
        lo + m.start()
        for m in re.finditer(r"^.*$", passage[lo:hi], re.MULTILINE)
        if ITEM_START.match(m.group())
    ]
    if len(starts) < 2:
        return []
    bounds = [lo, *(s for s in starts if s > lo), hi]
    return [(a, b) for a, b in itertools.pairwise(bounds) if passage[a:b].strip()]


def units(passage: str, max_chars: int = 300) -> list[Unit]:
    """The passage cut into units: paragraphs, a heading-like paragraph (short,
    no closing punctuation: "r(eturn)", "str.zfill(width)") joined to the one
    it introduces, the items of a list-like paragraph (one option of an option
    table with its continuation lines, one bullet), and a paragraph longer than
    `max_chars` cut into sentences (then between words). Offsets index the
    passage exactly."""
    paragraphs: list[tuple[int, int]] = []
    items: set[int] = set()  # indices of list items: never taken for headings
    for m in re.finditer(r"\S[^\n]*(?:\n(?!\s*\n)[^\n]*)*", passage):
        line_start = passage.rfind("\n", 0, m.start()) + 1  # an item's indentation counts
        found = _line_items(passage, line_start, m.end())
        items.update(range(len(paragraphs), len(paragraphs) + len(found)))
        paragraphs += found or [(m.start(), m.end())]
    entries: list[tuple[int, int, int]] = []  # (start, body start, end)
    i = 0
    while i < len(paragraphs):
        lo, hi = paragraphs[i]
        head = passage[lo:hi].rstrip()
        heading = i not in items and len(head) < 80 and not head.endswith((".", "!", "?", ":"))
        if heading and i + 1 < len(paragraphs):
            entries.append((lo, paragraphs[i + 1][0], paragraphs[i + 1][1]))
            i += 2
        else:
            entries.append((lo, lo, hi))
            i += 1
    out: list[Unit] = []
    for lo, body, hi in entries:
        if hi - lo <= max_chars:
            out.append(_unit(passage, lo, hi))
            continue
        text = passage[body:hi]
        cuts = [0, *(m.end() for m in _SENTENCE_END.finditer(text)), len(text)]
        first = True
        for a, b in itertools.pairwise(cuts):
            for x, y in _wrap(text, a, b, max_chars):
                start = lo if first else body + x  # the heading stays with the first sentence
                first = False
                if passage[start : body + y].strip():
                    out.append(_unit(passage, start, body + y))
    return out


def sentences(passage: str, lo: int, hi: int) -> list[Unit]:
    """The sentences of `passage[lo:hi]` (paragraphs split at sentence ends),
    with offsets into `passage`."""
    out = []
    for paragraph in _PARAGRAPH.finditer(passage[lo:hi]):
        start, end = lo + paragraph.start(), lo + paragraph.end()
        cuts = [start, *(start + m.end() for m in _SENTENCE_END.finditer(paragraph.group())), end]
        out += [_unit(passage, a, b) for a, b in itertools.pairwise(cuts) if passage[a:b].strip()]
    return out


def _unit(passage: str, lo: int, hi: int) -> Unit:
    piece = passage[lo:hi]
    left = lo + len(piece) - len(piece.lstrip())
    right = hi - (len(piece) - len(piece.rstrip()))
    return Unit(left, right, passage[left:right])


def _wrap(text: str, lo: int, hi: int, max_chars: int) -> list[tuple[int, int]]:
    spans = []
    while hi - lo > max_chars:
        cut = text.rfind(" ", lo, lo + max_chars)
        if cut <= lo:
            cut = lo + max_chars
        spans.append((lo, cut))
        lo = cut
    spans.append((lo, hi))
    return spans
