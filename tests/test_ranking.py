"""`ranking.top` (what a collection's search ranks) against the plain
definition, `best(candidates(...), k)`, on indexes full of tied scores."""

from __future__ import annotations

import numpy as np
import pytest

from flask_app import simcore
from flask_app.store import ranking


def tied_index(rng: np.random.Generator, rows: int, dim: int) -> simcore.Index:
    """Rows drawn from a few distinct unit vectors (so exact scores tie),
    under shuffled ids (so the id tie-break is not the row order)."""
    base = rng.standard_normal((max(2, rows // 8), dim)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    matrix = base[rng.integers(0, len(base), rows)]
    ids = [f"id-{n:05d}" for n in rng.permutation(rows)]
    index = simcore.Index(dim)
    index.upsert(ids, matrix)
    index.build_binary()
    return index


@pytest.mark.parametrize("kind", ["f32", "int8", "binary"])
def test_top_is_the_best_k_of_the_candidates(kind: str) -> None:
    rng = np.random.default_rng(7)
    for trial in range(12):
        rows = int(rng.integers(5, 1200))
        index = tied_index(rng, rows, 32)
        ids = [f"id-{n:05d}" for n in range(rows)]
        for k in (1, 3, 10, 50):
            query = rng.standard_normal(32).astype(np.float32)
            query /= np.linalg.norm(query)
            allow = None if trial % 3 else sorted(rng.choice(ids, rows // 2 + 1, replace=False))
            expected = ranking.best(ranking.candidates(index, query, k, kind, allow), k)
            assert ranking.top(index, query, k, kind, allow) == expected, (trial, k)
