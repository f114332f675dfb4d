"""Checks on client-sent vectors, with messages that name the offending field."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


class VectorError(ValueError):
    """A vector is empty, ragged, out of range, non-finite or all zeros."""


def as_matrix(
    rows: Sequence[Sequence[float]], field: str, min_dim: int, max_dim: int
) -> npt.NDArray[np.float32]:
    """Rows as an (n, d) float32 matrix; every row must have the same length d."""
    if not rows:
        raise VectorError(f"{field}: no vectors")
    dim = len(rows[0])
    for i, row in enumerate(rows):
        if len(row) != dim:
            raise VectorError(
                f"{field}[{i}].vector has {len(row)} dimensions, {field}[0].vector has {dim}"
            )
    if not min_dim <= dim <= max_dim:
        raise VectorError(
            f"{field}[0].vector has {dim} dimensions; allowed: {min_dim} to {max_dim}"
        )
    with np.errstate(over="ignore"):
        matrix = np.asarray(rows, dtype=np.float32)
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        i = int(np.argmin(finite))
        raise VectorError(f"{field}[{i}].vector has a value outside the float32 range")
    zero = ~matrix.any(axis=1)
    if zero.any():
        raise VectorError(f"{field}[{int(np.argmax(zero))}].vector is all zeros")
    return matrix
