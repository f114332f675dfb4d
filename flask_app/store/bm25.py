"""BM25 over several shards, scoring as SQLite FTS5's bm25() would over all
of their rows together.

FTS5 scores a row with its collection's statistics (row count, average row
length, rows holding each phrase). A shard has only its own, so a sharded
search first sums every shard's statistics, then each shard rescores its
matching rows with the sums: the same formula, in the same order of
operations, as fts5_aux.c's bm25 (k1 = 1.2, b = 0.75), hence the same scores
one collection holding every row would give.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

K1 = 1.2
B = 0.75


@dataclass(frozen=True)
class LexicalStats:
    rows: int  # rows in the text index
    tokens: int  # tokens in all of them
    hits: tuple[int, ...]  # rows holding each word

    def __add__(self, other: LexicalStats) -> LexicalStats:
        return LexicalStats(
            self.rows + other.rows,
            self.tokens + other.tokens,
            tuple(a + b for a, b in zip(self.hits, other.hits, strict=True)),
        )

    def idf(self, n: int) -> float:
        value = math.log((0.5 + self.rows - self.hits[n]) / (0.5 + self.hits[n]))
        return value if value > 0.0 else 1e-6

    @property
    def avgdl(self) -> float:
        return self.tokens / self.rows


def phrase(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'


def _varints(blob: bytes) -> list[int]:
    """SQLite's variable-length integers, as FTS5 stores its sizes."""
    out, value, n = [], 0, 0
    for byte in blob:
        n += 1
        if n == 9:
            out.append((value << 8) | byte)
            value, n = 0, 0
        elif byte & 0x80:
            value = (value << 7) | (byte & 0x7F)
        else:
            out.append((value << 7) | byte)
            value, n = 0, 0
    return out


def _averages(db: sqlite3.Connection) -> tuple[int, int]:
    """(rows, tokens) of this text index (FTS5's averages record)."""
    row = db.execute("SELECT block FROM items_fts_data WHERE id = 1").fetchone()
    sizes = _varints(row[0]) if row and row[0] else []
    return (sizes[0], sum(sizes[1:])) if sizes else (0, 0)


def stats(db: sqlite3.Connection, words: Sequence[str]) -> LexicalStats:
    """This text index's statistics for `words`."""
    rows, tokens = _averages(db)
    hits = tuple(
        db.execute(
            "SELECT count(*) FROM items_fts WHERE items_fts MATCH ?", (phrase(w),)
        ).fetchone()[0]
        for w in words
    )
    return LexicalStats(rows, tokens, hits)


def rescored(db: sqlite3.Connection, words: Sequence[str], total: LexicalStats) -> dict[str, float]:
    """Every row holding any of `words`, scored with the statistics `total`."""
    rows, tokens = _averages(db)
    if rows == 0:
        return {}
    found = [
        db.execute(
            "SELECT rowid, id, -bm25(items_fts) FROM items_fts WHERE items_fts MATCH ?",
            (phrase(word),),
        ).fetchall()
        for word in words
    ]
    # the rows each word matched are its hits: no second count per word
    local = LexicalStats(rows, tokens, tuple(len(f) for f in found))
    freqs: dict[str, list[float]] = {}
    sizes = _row_lengths(db, {rowid for matched in found for rowid, _, _ in matched})
    lengths = {item_id: sizes.get(rowid, 0) for matched in found for rowid, item_id, _ in matched}
    for n, matched in enumerate(found):
        for _, item_id, score in matched:
            # FTS5 scored this row for this one word with the shard's own
            # statistics: undo them to recover the word's count in the row
            d = lengths[item_id]
            g = score / local.idf(n)
            k = K1 * (1 - B + B * d / local.avgdl)
            count = round(g * k / (K1 + 1.0 - g))
            freqs.setdefault(item_id, [0.0] * len(words))[n] = float(count)
    avgdl = total.avgdl
    idfs = [total.idf(n) for n in range(len(words))]
    out = {}
    for item_id, counts in freqs.items():
        d = lengths[item_id]
        score = 0.0
        for f, idf in zip(counts, idfs, strict=True):
            num = f * (K1 + 1.0)
            denom = f + K1 * (1 - B + B * d / avgdl)
            score += idf * (num / denom)
        out[item_id] = score
    return out


def _row_lengths(db: sqlite3.Connection, rowids: set[int]) -> dict[int, int]:
    """Token counts of the text index's rows `rowids`, 500 per query
    (SQLite's bound-parameter limit)."""
    wanted = sorted(rowids)
    out: dict[int, int] = {}
    for lo in range(0, len(wanted), 500):
        part = wanted[lo : lo + 500]
        marks = ",".join("?" * len(part))
        for rowid, size in db.execute(
            f"SELECT id, sz FROM items_fts_docsize WHERE id IN ({marks})", part
        ):
            out[rowid] = sum(_varints(size))
    return out
