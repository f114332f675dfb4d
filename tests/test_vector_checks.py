"""The checks on client-sent vectors name the same row and problem whether a
request sends one vector (a query: the one-row fast path) or many."""

from __future__ import annotations

import numpy as np
import pytest

from flask_app.api.http.vectors import VectorError, check_matrix
from flask_app.store.unit import unit_rows

DIM = 8
ORDINARY = [0.5, -1.0, 2.0, 0.0, 0.25, 3.0, -0.5, 1.0]


def label(i: int) -> str:
    return f"items[{i}].vector"


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ([0.0] * DIM, "is all zeros"),
        ([float("nan")] + [1.0] * (DIM - 1), "outside the float32 range"),
        ([float("inf")] + [1.0] * (DIM - 1), "outside the float32 range"),
        ([1e-30] * DIM, "too close to zero to have a direction"),
    ],
)
@pytest.mark.parametrize("before", [0, 2])
def test_a_faulty_row_is_named_alone_or_after_good_rows(
    row: list[float], problem: str, before: int
) -> None:
    matrix = np.array([ORDINARY] * before + [row], dtype=np.float32)
    with pytest.raises(VectorError) as refused:
        check_matrix(matrix, label, 1, 4096)
    assert str(refused.value).startswith(f"items[{before}].vector ")
    assert problem in str(refused.value)
    assert unit_rows(matrix)[1] == before  # the store refuses the same row


@pytest.mark.parametrize(
    "row",
    [ORDINARY, [1e30] + [0.1] * (DIM - 1), [1e-10] * DIM, [3e-8] + [0.0] * (DIM - 1)],
)
@pytest.mark.parametrize("count", [1, 3])
def test_rows_with_a_direction_pass_and_become_unit_length(row: list[float], count: int) -> None:
    matrix = np.array([row] * count, dtype=np.float32)
    assert check_matrix(matrix, label, 1, 4096) is matrix
    unit, bad = unit_rows(matrix)
    assert bad is None
    wide = np.array(row, dtype=np.float64)
    expected = (wide / np.linalg.norm(wide)).astype(np.float32)
    np.testing.assert_allclose(unit, np.tile(expected, (count, 1)), rtol=1e-6, atol=1e-7)
