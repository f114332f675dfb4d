"""Durability: kill -9 the real server during concurrent uploads, replacements
and deletes, restart it, and check that every acknowledged write is there,
whole, that every acknowledged delete stays deleted, and that no batch is
half-visible. Several rounds; every loop is bounded in count and time."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import requests

from tests.http_client import start_server

DIM = 128
# CI runs 4 rounds; the README figure: EDGERAG_CRASH_ROUNDS=20 pytest tests/test_crash.py
ROUNDS = int(os.environ.get("EDGERAG_CRASH_ROUNDS", "4"))
WRITERS = 3
BATCH = 25


def vector_for(item_id: str, version: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(f"{item_id}@{version}".encode()).digest()[:4], "little")
    v = np.random.default_rng(seed).standard_normal(DIM)
    return [float(x) for x in v / np.linalg.norm(v)]


@contextmanager
def server(data_dir: Path, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A vector-only server (no models) on `data_dir`; killed at the end if still alive."""
    running = start_server(
        ["--no-llm", "--no-embedder", "--data-dir", str(data_dir), "--max-items", "0"],
        log,
        timeout=30,
    )
    try:
        yield running.proc, running.base
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
        running.proc.wait(10)


@dataclass
class Ledger:
    """What the clients were told: acknowledged versions and in-flight batches."""

    acked: dict[str, int] = field(default_factory=dict)
    unacked_batches: list[dict[str, int]] = field(default_factory=list)
    deleted: set[str] = field(default_factory=set)  # acknowledged deletes (never re-added)
    unacked_deletes: list[list[str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def writer(base: str, ledger: Ledger, writer_id: int, round_no: int, stop: threading.Event) -> None:
    session = requests.Session()
    rng = random.Random(writer_id * 1000 + round_no)
    n = 0
    deadline = time.monotonic() + 20
    while not stop.is_set() and time.monotonic() < deadline and n < 400:
        n += 1
        with ledger.lock:  # each writer replaces only its own items: one writer per id
            known = [i for i in ledger.acked if f"-w{writer_id}-" in i]
        if len(known) > 5 and rng.random() < 0.2:  # delete a few acknowledged items
            doomed = rng.sample(known, 5)
            try:
                r = session.delete(base + "/items", json={"ids": doomed}, timeout=10)
            except requests.RequestException:
                with ledger.lock:
                    ledger.unacked_deletes.append(doomed)
                return
            with ledger.lock:
                if r.status_code == 200:
                    for i in doomed:
                        ledger.acked.pop(i, None)
                    ledger.deleted.update(doomed)
                else:
                    ledger.unacked_deletes.append(doomed)
            continue
        batch: dict[str, int] = {}
        for j in range(BATCH):
            if known and rng.random() < 0.3:  # replace an acknowledged item
                item_id = rng.choice(known)
                batch[item_id] = ledger.acked.get(item_id, 0) + 1 + writer_id * 1000 + n
            else:
                batch[f"r{round_no}-w{writer_id}-{n}-{j}"] = 0
        items = [
            {"id": i, "vector": vector_for(i, ver), "text": f"{i}@{ver}"}
            for i, ver in batch.items()
        ]
        try:
            r = session.post(
                base + "/upload", json={"store_mode": "vector", "items": items}, timeout=10
            )
        except requests.RequestException:
            with ledger.lock:
                ledger.unacked_batches.append(batch)
            return
        with ledger.lock:
            if r.status_code == 200:
                ledger.acked.update(batch)
            else:
                ledger.unacked_batches.append(batch)


def stored_versions(base: str) -> dict[str, int]:
    body = requests.get(base + "/export", timeout=60).json()
    out = {}
    for item in body["items"]:
        item_id, version = item["text"].rsplit("@", 1)
        assert item_id == item["id"]
        out[item_id] = int(version)
    assert body["item_count"] == len(out)
    return out


def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    data_dir, log = tmp_path / "data", tmp_path / "server.log"
    ledger = Ledger()
    rng = random.Random(7)
    for round_no in range(ROUNDS):
        with server(data_dir, log) as (proc, base):
            stop = threading.Event()
            threads = [
                threading.Thread(target=writer, args=(base, ledger, w, round_no, stop))
                for w in range(WRITERS)
            ]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.3, 1.2))
            os.kill(proc.pid, signal.SIGKILL)
            stop.set()
            for t in threads:
                t.join(30)
        with server(data_dir, log) as (_proc, base):
            stored = stored_versions(base)
            # every acknowledged write is there, at its acknowledged version or a
            # later one that was in flight when the server died
            in_flight = {i: v for b in ledger.unacked_batches for i, v in b.items()}
            deleting = {i for batch in ledger.unacked_deletes for i in batch}
            for item_id, version in ledger.acked.items():
                if item_id in deleting and item_id not in stored:
                    continue  # its delete was in flight when the server died
                assert item_id in stored, f"round {round_no}: acknowledged {item_id} lost"
                assert stored[item_id] in (version, in_flight.get(item_id)), item_id
            back = ledger.deleted & stored.keys()
            assert not back, f"round {round_no}: acknowledged deletes came back: {sorted(back)[:3]}"
            for doomed in ledger.unacked_deletes:
                present = [i in stored for i in doomed]
                assert all(present) or not any(present), f"round {round_no}: half a delete"
            # an unacknowledged batch is visible entirely or not at all
            for batch in ledger.unacked_batches:
                visible = [
                    stored.get(i) == v
                    for i, v in batch.items()
                    if i not in ledger.acked or ledger.acked[i] != v
                ]
                assert all(visible) or not any(visible), f"round {round_no}: half a batch"
            # text and vector always belong to the same version
            sample = rng.sample(sorted(stored), min(40, len(stored)))
            for item_id in sample:
                hit = requests.post(
                    base + "/search",
                    timeout=10,
                    json={"query": vector_for(item_id, stored[item_id]), "top_k": 1},
                ).json()["results"][0]
                assert hit["id"] == item_id and hit["score"] >= 0.9999, (item_id, hit)
            print(
                f"round {round_no}: {len(ledger.acked)} acked, {len(ledger.deleted)} deleted, "
                f"{len(ledger.unacked_batches)} batches and {len(ledger.unacked_deletes)} "
                f"deletes in flight, {len(stored)} stored"
            )
            # adopt what survived as the new truth for the next round
            ledger.acked = dict(stored)
            ledger.unacked_batches.clear()
            ledger.deleted |= {i for batch in ledger.unacked_deletes for i in batch} - stored.keys()
            ledger.unacked_deletes.clear()
    assert len(ledger.acked) > 0
