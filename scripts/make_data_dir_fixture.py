"""Write a small data directory with the edgerag code on `sys.path`: a
collection (vectors, texts, metadata), the file catalog (a namespace, a
collection, a file with its chunks), conversation memory and the two job
tables. Run it with a checkout of a release to make the fixture that tests
open with today's code (tests/test_sqlite_db.py):

    git worktree add /tmp/release <commit>
    cp flask_app/simcore*.so /tmp/release/flask_app/
    PYTHONPATH=/tmp/release .venv/bin/python scripts/make_data_dir_fixture.py \\
        tests/fixtures/data_dir_<release>

Every value is fixed (ids, texts, vectors), so two runs of one release write
the same rows; timestamps are the run's.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

from flask_app.rag.memory import Conversations, Turn
from flask_app.store import Store
from flask_app.store.catalog import Catalog
from flask_app.store.job_table import JobTable

DIM = 8
ITEMS = {
    "ferry": "The ferry leaves the harbour at dawn.",
    "kiosk": "The kiosk opens at nine and closes at five.",
    "parking": "Parking is free on Sundays behind the town hall.",
}


def vectors() -> np.ndarray:
    rows = np.zeros((len(ITEMS), DIM), dtype=np.float32)
    for n in range(len(ITEMS)):
        rows[n, n] = 1.0
        rows[n, DIM - 1] = 0.5
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def write(out: Path) -> None:
    store = Store(out)
    collection = store.edge()
    collection.upsert(
        list(ITEMS),
        vectors(),
        list(ITEMS.values()),
        [{"topic": name} for name in ITEMS],
        mode="vector",
        embedding_model=None,
    )
    store.close()

    catalog = Catalog(out / "catalog.sqlite3")
    catalog.put_namespace("town")
    catalog.put_collection("town", "notices", "Town notices", None)
    text = "Bins are collected on Tuesdays.\n\nThe library is closed on Mondays."
    record, _ = catalog.add_file(
        "town", "notices", "notices.txt", "text/plain", text.encode(), {"year": 2026}, []
    )
    catalog.set_chunks(record.file_id, text, [(0, 31), (33, len(text))])
    catalog.finish(record.file_id)
    catalog.close()

    memory = Conversations(out / "conversations.sqlite3")
    memory.append(
        "0b7f3c52-5d7e-4f0e-9a51-2f8f0c3d9e11",
        [Turn("Who runs the kiosk?", "The town.", "The town.", ["kiosk"])],
    )
    for name in ("jobs", "research_runs"):
        table = JobTable(out / f"{name}.sqlite3")
        table.add(f"{name}-1", "rag", {"question": "When does the ferry leave?"}, "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the directory to write (replaced)")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    write(args.out)
    (args.out / ".lock").unlink(missing_ok=True)
    for stray in args.out.rglob("*-shm"):
        stray.unlink()
    print(f"wrote {args.out} with {sys.modules['flask_app'].__file__}")


if __name__ == "__main__":
    main()
