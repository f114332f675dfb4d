"""simcore.Index from Python: numpy reference, recall, filters, persistence, GIL release."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flask_app import simcore


def reference_ids(data: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    scores = data @ query
    return [int(i) for i in np.lexsort((np.arange(len(scores)), -scores))[:k]]


def make_index(data: np.ndarray) -> simcore.Index:
    index = simcore.Index(data.shape[1])
    index.upsert([f"r{i}" for i in range(len(data))], data)
    return index


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 400),
    d=st.sampled_from([1, 3, 17, 383, 384, 385]),
    k=st.integers(1, 60),
    seed=st.integers(0, 2**32 - 1),
)
def test_exact_search_equals_numpy_including_ties(n: int, d: int, k: int, seed: int) -> None:
    # Small integers make every dot product exact in f32, so ties are real ties
    # and the expected order (score desc, insertion asc) is unambiguous.
    rng = np.random.default_rng(seed)
    data = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
    query = rng.integers(-2, 3, size=d).astype(np.float32)
    ids, scores = make_index(data).search(query, k)
    want = reference_ids(data, query, k)
    assert ids == [f"r{i}" for i in want]
    np.testing.assert_array_equal(scores, (data @ query)[want])


def test_int8_recall_at_10_is_at_least_099() -> None:
    rng = np.random.default_rng(7)
    data = rng.standard_normal((20_000, 384)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    index = make_index(data)
    queries = rng.standard_normal((50, 384)).astype(np.float32)
    hits = 0
    for q in queries:
        exact, _ = index.search(q, 10)
        approx, scores = index.search(q, 10, mode="int8")
        hits += len(set(exact) & set(approx))
        rows = [int(i[1:]) for i in approx]
        np.testing.assert_allclose(scores, data[rows] @ q, rtol=1e-5, atol=1e-6)
    assert hits / 500 >= 0.99


def test_batch_equals_single_queries() -> None:
    rng = np.random.default_rng(3)
    data = rng.standard_normal((3000, 64)).astype(np.float32)
    index = make_index(data)
    queries = rng.standard_normal((5, 64)).astype(np.float32)
    for mode in ("exact", "int8"):
        batch = index.search_batch(queries, 8, mode=mode)
        for q, (ids, scores) in zip(queries, batch, strict=True):
            single_ids, single_scores = index.search(q, 8, mode=mode)
            assert ids == single_ids
            np.testing.assert_array_equal(scores, single_scores)


def test_filtered_search_scans_only_allowed_ids() -> None:
    rng = np.random.default_rng(4)
    data = rng.standard_normal((1000, 32)).astype(np.float32)
    index = make_index(data)
    allowed = [f"r{i}" for i in range(0, 1000, 10)] + ["not-there"]
    q = rng.standard_normal(32).astype(np.float32)
    ids, _ = index.search(q, 5, allow=allowed)
    want = reference_ids(data[::10], q, 5)
    assert ids == [f"r{i * 10}" for i in want]
    assert index.search(q, 5, allow=[])[0] == []


def test_upsert_delete_and_plain_lists() -> None:
    index = simcore.Index(2)
    assert index.upsert(["a", "b"], [[1.0, 0.0], [0.0, 1.0]]) == (2, 0)
    assert index.upsert(["a"], [[0.5, 0.5]]) == (0, 1)
    assert len(index) == 2 and "a" in index and "zz" not in index
    np.testing.assert_array_equal(index.get("a"), [0.5, 0.5])
    assert index.delete(["b", "nope"]) == [True, False]
    assert index.search([0.0, 1.0], 10)[0] == ["a"]
    index.compact()
    assert (len(index), index.rows, index.deleted_rows) == (1, 1, 0)


@pytest.mark.parametrize(
    ("call", "error", "fragment"),
    [
        (lambda ix: ix.search([1.0, 2.0], 1), simcore.DimensionMismatchError, "expected 3, got 2"),
        (lambda ix: ix.search([1.0, float("nan"), 0.0], 1), simcore.NonFiniteError, "index 1"),
        (lambda ix: ix.search([1.0, 0.0, 0.0], 0), simcore.SimcoreValueError, "k must be"),
        (lambda ix: ix.search([1.0, 0.0, 0.0], 1, mode="fast"), ValueError, "mode must be"),
        (lambda ix: ix.upsert(["x"], [[1.0, 2.0]]), simcore.DimensionMismatchError, "got 2"),
        (lambda ix: ix.upsert(["x", "y"], [[1.0, 2.0, 3.0]]), ValueError, "2 ids for 1 vectors"),
        (lambda ix: ix.upsert(["x", "x"], np.ones((2, 3))), ValueError, 'duplicate id "x"'),
        (lambda ix: ix.upsert(["x"], [[np.inf, 0.0, 0.0]]), simcore.NonFiniteError, "non-finite"),
    ],
)
def test_bad_input_raises_value_errors_and_changes_nothing(call, error, fragment) -> None:  # type: ignore[no-untyped-def]
    index = simcore.Index(3)
    index.upsert(["a"], [[1.0, 0.0, 0.0]])
    with pytest.raises(error, match=fragment):
        call(index)
    assert len(index) == 1 and index.rows == 1


def test_persistence_round_trip_and_corruption(tmp_path: Path) -> None:
    path = tmp_path / "ix"
    index = simcore.Index.create(path, 4)
    index.upsert(["a", "b"], np.eye(4, dtype=np.float32)[:2])
    index.delete(["a"])
    del index
    reopened = simcore.Index.open(path)
    assert len(reopened) == 1 and "b" in reopened and reopened.path == path
    del reopened
    current = (path / "CURRENT").read_text().strip()
    (path / current / "header").write_bytes(b"\0" * 8192)
    with pytest.raises(OSError, match="no valid header"):
        simcore.Index.open(path)
    with pytest.raises(OSError):
        simcore.Index.open(tmp_path / "missing")


def test_empty_persistent_index_reopens(tmp_path: Path) -> None:
    simcore.Index.create(tmp_path / "e", 8)
    index = simcore.Index.open(tmp_path / "e")
    assert len(index) == 0 and index.search(np.ones(8), 3)[0] == []


def test_quantizers_follow_the_spec_example() -> None:
    x = [0.12, -0.48, 0.33, 0.91, -0.07, 0.26]
    assert simcore.quantize_max_scale(x).tolist() == [17, -67, 46, 127, -10, 36]
    assert simcore.quantize_min_max(x).tolist() == [110, 0, 149, 255, 75, 136]
    reduced = simcore.reduce_dims(x, 4)
    assert simcore.quantize_max_scale(reduced).tolist() == [17, -67, 46, 127]
    assert abs(float(np.linalg.norm(reduced)) - 1.0) < 1e-6
    with pytest.raises(ValueError, match="between 1 and 6"):
        simcore.reduce_dims(x, 7)


def test_two_searches_on_two_threads_overlap_in_time() -> None:
    rng = np.random.default_rng(5)
    # 3 MB of rows stay in cache: each scan is bound by compute, not by the
    # memory bandwidth two scans of a large index would share
    index = make_index(rng.standard_normal((2_000, 384)).astype(np.float32))
    index.threads = 1  # one core per search, so overlap shows as parallel speed-up
    queries = rng.standard_normal((1_500, 384)).astype(np.float32)

    def one_attempt() -> tuple[float, float]:
        start = time.perf_counter()
        index.search_batch(queries, 10)
        single = time.perf_counter() - start
        spans: list[tuple[float, float]] = []

        def run() -> None:
            t0 = time.perf_counter()
            index.search_batch(queries, 10)
            spans.append((t0, time.perf_counter()))

        threads = [threading.Thread(target=run) for _ in range(2)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        both = time.perf_counter() - start
        (a0, a1), (b0, b1) = spans
        assert a0 < b1 and b0 < a1, "the two searches did not overlap"
        return both, single

    # With the GIL held the two calls run back to back: about 2x one call, in
    # every attempt. Released, they share the two cores; a busy neighbour on a
    # shared host can slow one attempt, so the best of five counts.
    attempts = [one_attempt() for _ in range(5)]
    best = min(both / single for both, single in attempts)
    assert best < 1.6, f"two parallel searches took {best:.2f}x one search: {attempts}"


def test_main_thread_runs_while_a_search_is_in_rust() -> None:
    rng = np.random.default_rng(6)
    index = make_index(rng.standard_normal((50_000, 384)).astype(np.float32))
    index.threads = 1
    queries = rng.standard_normal((64, 384)).astype(np.float32)
    done = threading.Event()

    def work() -> None:
        index.search_batch(queries, 10)
        done.set()

    worker = threading.Thread(target=work)
    ticks = 0
    worker.start()
    while not done.is_set():
        ticks += 1
    worker.join()
    assert ticks > 10_000


CHECK_LEVEL = """
import sys, numpy as np
from flask_app import simcore
level = sys.argv[1]
assert simcore.simd_level() == level, (simcore.simd_level(), level)
rng = np.random.default_rng(1)
for d in (1, 3, 383, 384, 385, 1536):
    data = rng.standard_normal((300, d)).astype(np.float32)
    q = rng.standard_normal(d).astype(np.float32)
    index = simcore.Index(d)
    index.upsert([str(i) for i in range(300)], data)
    ids, scores = index.search(q, 10)
    want = np.argsort(-(data @ q), kind="stable")[:10]
    np.testing.assert_allclose(scores, (data @ q)[want], rtol=1e-4, atol=1e-4)
    approx, _ = index.search(q, 10, mode="int8", oversample=10)
    assert len(set(approx) & set(ids)) >= 9, d
print("ok", level)
"""


@pytest.mark.parametrize("level", simcore.supported_simd_levels())
def test_every_simd_level_gives_the_same_answers(level: str) -> None:
    env = dict(os.environ, SIMCORE_SIMD=level)
    result = subprocess.run(
        [sys.executable, "-c", CHECK_LEVEL, level],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ok {level}"


def test_unknown_simd_env_value_keeps_the_best_level() -> None:
    env = dict(os.environ, SIMCORE_SIMD="sse9")
    code = "from flask_app import simcore; print(simcore.simd_level())"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == simcore.supported_simd_levels()[-1]


def test_upsert_reads_a_fortran_order_matrix_by_rows() -> None:
    """A Fortran-order array is contiguous too, but column-major: it used to be
    stored transposed (every vector scrambled)."""
    rows = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4) + 1)
    index = simcore.Index(4)
    index.upsert(["a", "b", "c"], rows)
    stored = index.get("b")
    assert stored is not None and stored.tolist() == [5.0, 6.0, 7.0, 8.0]


# Readers search from several threads while a writer upserts and compacts. The
# index lock used to be taken with the GIL held: a reader waiting for it
# (behind a waiting writer) kept the GIL from a reader holding the lock, and
# all three hung. Run in a child process, so a hang fails instead of hanging.
CONCURRENT_READERS_AND_WRITER = """
import threading, time
import numpy as np
from flask_app import simcore

rng = np.random.default_rng(0)
index = simcore.Index(64)
ids = [f"r{i}" for i in range(20_000)]
index.upsert(ids, rng.standard_normal((len(ids), 64)).astype(np.float32))
stop = time.monotonic() + 2.0
searches = [0, 0, 0]

def read(slot):
    q = rng.standard_normal(64).astype(np.float32)
    while time.monotonic() < stop:
        index.search(q, 10)
        len(index), "r1" in index, index.rows
        searches[slot] += 1

readers = [threading.Thread(target=read, args=(i,)) for i in range(3)]
for t in readers:
    t.start()
rounds = 0
while time.monotonic() < stop:
    index.upsert(ids[:10_000], rng.standard_normal((10_000, 64)).astype(np.float32))
    index.compact()
    rounds += 1
for t in readers:
    t.join()
print("ok", rounds, sum(searches))
"""


def test_readers_and_a_writer_in_threads_never_deadlock() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", CONCURRENT_READERS_AND_WRITER],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("threads searching while another writes and compacts hung")
    assert done.returncode == 0, done.stderr
    word, rounds, searches = done.stdout.split()
    assert word == "ok" and int(rounds) > 0 and int(searches) > 0


def test_compactions_from_two_threads_take_turns(tmp_path: Path) -> None:
    """Two compactions at once would write the same new generation."""
    rng = np.random.default_rng(4)
    index = simcore.Index.create(tmp_path / "idx", 32)
    ids = [f"r{i}" for i in range(20_000)]
    vectors = rng.standard_normal((len(ids), 32)).astype(np.float32)
    index.upsert(ids, vectors)
    index.delete(ids[:15_000])
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(index.compact())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [True, True] and (len(index), index.rows) == (5_000, 5_000)
    reopened = simcore.Index.open(tmp_path / "idx")
    assert (len(reopened), reopened.rows) == (5_000, 5_000)
    stored = reopened.get("r19999")
    assert stored is not None and np.array_equal(stored, vectors[-1])
