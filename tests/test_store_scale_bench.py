"""The limits `benches/search/store_scale.py` prints: the bytes it counts per vector
are the bytes simcore's files grow by; CPU seconds are read for real."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from benches.search.store_scale import cpu_seconds, durable_write_bandwidth, stored_bytes_per_vector
from flask_app import simcore


def data_bytes(index_dir: Path) -> int:
    return sum(
        f.stat().st_size
        for f in index_dir.rglob("*")
        if f.is_file() and f.name in ("f32", "i8", "meta", "ids")
    )


@pytest.mark.parametrize("dim", [384, 100, 16])
def test_bytes_per_vector_are_what_the_index_writes(tmp_path: Path, dim: int) -> None:
    index = simcore.Index.create(tmp_path / "index", dim)
    before = data_bytes(tmp_path / "index")
    n = 200
    ids = [f"doc-{100_000 + i}" for i in range(n)]
    index.upsert(ids, np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32))
    grown = data_bytes(tmp_path / "index") - before
    assert grown == n * stored_bytes_per_vector(dim, len(ids[0]))


def test_durable_write_bandwidth_is_a_rate(tmp_path: Path) -> None:
    rate = durable_write_bandwidth(tmp_path, megabytes=1, repeats=3)
    assert math.isfinite(rate) and rate > 0
    assert list(tmp_path.iterdir()) == []  # its file is gone


def test_cpu_seconds_count_this_process_working() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    spent = cpu_seconds(os.getpid()) - before
    assert 0.2 <= spent <= 5.0
