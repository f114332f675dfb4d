"""Conversation memory: the turns of a conversation, kept in SQLite under the
data directory so that a conversation survives a restart.

A memory is named by a UUID. It keeps its newest `max_turns` turns and is
forgotten `ttl_s` seconds after its last use; an unknown (or forgotten) UUID
is simply an empty memory, so a client that kept its UUID across a restart
or an expiry starts afresh instead of failing. Memories are stored per
tenant (`scoped`): the same UUID sent with another API key is another memory.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from flask_app.inference.llm import ChatMessage
from flask_app.store import sqlite_db


@dataclass(frozen=True)
class Turn:
    question: str
    response: str  # the model's raw output
    answer: str
    sources: list[str] = field(default_factory=list)
    at: float = 0.0


_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    memory TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    question TEXT NOT NULL,
    response TEXT NOT NULL,
    answer TEXT NOT NULL,
    sources TEXT NOT NULL,
    PRIMARY KEY (memory, seq)
);
CREATE INDEX IF NOT EXISTS turns_at ON turns (at);
"""

# files written before numbered migrations are at version 0 with the table
MEMORY_SCHEMA = sqlite_db.Schema("conversation memory", (sqlite_db.script(_SCHEMA),))


class Conversations:
    def __init__(self, path: Path, *, max_turns: int = 10, ttl_s: float = 86_400.0) -> None:
        self.path = path
        self.max_turns = max_turns
        self.ttl_s = ttl_s
        self._sqlite = sqlite_db.Database(path, MEMORY_SCHEMA)

    def _db(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._sqlite.transaction()

    def _forget_idle(self, db: sqlite3.Connection, now: float) -> None:
        db.execute(
            "DELETE FROM turns WHERE memory IN "
            "(SELECT memory FROM turns GROUP BY memory HAVING max(at) < ?)",
            (now - self.ttl_s,),
        )

    def turns(self, memory: str) -> list[Turn]:
        """The remembered turns, oldest first (none for an unknown or idle memory)."""
        now = time.time()
        rows = (
            self._sqlite.connection()
            .execute(
                "SELECT question, response, answer, sources, at FROM turns "
                "WHERE memory = ? ORDER BY seq",
                (memory,),
            )
            .fetchall()
        )
        if not rows or max(r[4] for r in rows) < now - self.ttl_s:
            return []
        return [Turn(q, r, a, json.loads(s), at) for q, r, a, s, at in rows]

    def append(self, memory: str, turns: Sequence[Turn]) -> None:
        """Add turns in order; the oldest beyond `max_turns` are dropped."""
        now = time.time()
        with self._db() as db:
            self._forget_idle(db, now)
            (last,) = db.execute(
                "SELECT coalesce(max(seq), 0) FROM turns WHERE memory = ?", (memory,)
            ).fetchone()
            db.executemany(
                "INSERT INTO turns (memory, seq, at, question, response, answer, sources) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (memory, last + i, now, t.question, t.response, t.answer, json.dumps(t.sources))
                    for i, t in enumerate(turns, 1)
                ],
            )
            db.execute(
                "DELETE FROM turns WHERE memory = ? AND seq <= ?",
                (memory, last + len(turns) - self.max_turns),
            )


def scoped(memory: str, tenant: str) -> str:
    """The stored name of `memory` for `tenant` (the UUID itself without keys,
    so memories kept before keys were configured stay readable then)."""
    return f"{tenant}/{memory}" if tenant else memory


def as_history(turns: Sequence[Turn]) -> list[ChatMessage]:
    """Turns as user/assistant messages (the assistant says the parsed answer)."""
    out: list[ChatMessage] = []
    for t in turns:
        out.append({"role": "user", "content": t.question})
        out.append({"role": "assistant", "content": t.answer})
    return out
