"""Where a server keeps its own records — the file catalog, conversation
memory and job tables — next to the data it serves: its data directory, or,
for a server joined to a cluster, the cluster (`flask_app.cluster.records`),
where every server of the cluster reads the same ones."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from flask_app.rag.memory import Conversations
from flask_app.store.catalog import Catalog
from flask_app.store.job_table import JobTable


class Records(Protocol):
    # how often a server's workers look for work others left (None: they
    # need not, nobody else adds any)
    poll_s: float | None

    def catalog(self) -> Catalog: ...

    def conversations(self, *, max_turns: int, ttl_s: float) -> Conversations: ...

    def job_table(self, name: str, *, retention_s: float) -> JobTable: ...

    def failures(self) -> dict[str, str]:
        """What keeps the records from answering ("records" → why), for /health."""
        ...


class LocalRecords:
    """Records in SQLite files in `data_dir`, which this server alone uses:
    the claims of a previous run (its process is gone) are dropped, so its
    unfinished work is taken up again."""

    poll_s: float | None = None

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def catalog(self) -> Catalog:
        catalog = Catalog(self.data_dir / "catalog.sqlite3")
        catalog.release_claims()
        return catalog

    def conversations(self, *, max_turns: int, ttl_s: float) -> Conversations:
        return Conversations(
            self.data_dir / "conversations.sqlite3", max_turns=max_turns, ttl_s=ttl_s
        )

    def job_table(self, name: str, *, retention_s: float) -> JobTable:
        table = JobTable(self.data_dir / f"{name}.sqlite3", retention_s=retention_s)
        table.release_all()
        return table

    def failures(self) -> dict[str, str]:
        return {}  # the files are the server's own: a failure surfaces as the error it is
