"""simcore.top_k against a numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flask_app import simcore


def reference(rows: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = rows @ query
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return order, scores[order]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 300),
    d=st.sampled_from([1, 3, 8, 383, 384, 385]),
    k=st.integers(1, 50),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_numpy(n: int, d: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((n, d)).astype(np.float32)
    query = rng.standard_normal(d).astype(np.float32)
    ids, scores = simcore.top_k(rows, query, k)
    want_ids, want_scores = reference(rows, query, k)
    assert len(ids) == min(k, n)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-4, atol=1e-4)
    # ids may differ only where scores are within float noise of each other
    for got, want in zip(ids, want_ids, strict=True):
        if got != want:
            assert abs(rows[got] @ query - rows[want] @ query) < 1e-3


def test_ties_go_to_lower_rows() -> None:
    rows = np.ones((5, 4), dtype=np.float32)
    ids, _ = simcore.top_k(rows, np.ones(4, dtype=np.float32), 3)
    assert ids.tolist() == [0, 1, 2]


def test_accepts_plain_lists() -> None:
    ids, scores = simcore.top_k([[1.0, 0.0], [0.0, 2.0]], [0.0, 1.0], 1)
    assert ids.tolist() == [1] and scores.tolist() == [2.0]


def test_wrong_dimension_names_both() -> None:
    with pytest.raises(simcore.DimensionMismatchError, match="expected 4, got 3"):
        simcore.top_k(np.zeros((2, 4), np.float32), np.zeros(3, np.float32), 1)


def test_nan_query_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        simcore.top_k(np.zeros((2, 2), np.float32), [0.0, float("nan")], 1)


def test_top_k_gives_the_same_answer_for_every_layout_and_size() -> None:
    """In place (C-contiguous float32, split across cores past 8 MB) or
    converted (Fortran order, float64, a strided view): the same hits."""
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((12_000, 256), dtype=np.float32)  # 12 MB: the parallel path
    query = rng.standard_normal(256, dtype=np.float32)
    expected = np.argsort(-(rows.astype(np.float64) @ query), kind="stable")[:7]
    for variant in (rows, np.asfortranarray(rows), rows.astype(np.float64)):
        idx, scores = simcore.top_k(variant, query, 7)
        assert idx.tolist() == expected.tolist()
        assert np.allclose(scores, rows[idx] @ query, rtol=1e-4)
    strided = rows[::2]
    idx, _ = simcore.top_k(strided, query, 3)
    assert idx.tolist() == np.argsort(-(strided @ query), kind="stable")[:3].tolist()
