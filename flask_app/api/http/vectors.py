"""Checks on client-sent vectors, with messages that name the offending field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from flask_app import simcore
from flask_app.errors import ServiceError
from flask_app.store.unit import MIN_NORM, all_measurable, first_unusable_row


class VectorError(ServiceError, ValueError):
    """A vector has too few or too many dimensions, a non-finite value, is
    all zeros, or is not a list of numbers (400)."""


def matrix(rows: list[Any], label: str) -> npt.NDArray[np.float32]:
    """Client-sent lists of numbers as one float32 matrix (`label` names a
    row in messages, with `{}` for its index)."""
    try:
        return simcore.matrix_from_lists(rows, label)
    except ValueError as exc:
        raise VectorError(str(exc)) from None


def check_matrix(
    matrix: npt.NDArray[np.float32], label: Callable[[int], str], min_dim: int, max_dim: int
) -> npt.NDArray[np.float32]:
    """Dimension range, finiteness and non-zero rows of an (n, d) matrix;
    `label(i)` names row i in messages (e.g. `items[3].vector`)."""
    dim = int(matrix.shape[1]) if matrix.ndim == 2 else 0
    if not min_dim <= dim <= max_dim:
        raise VectorError(f"{label(0)} has {dim} dimensions; allowed: {min_dim} to {max_dim}")
    if all_measurable(matrix):
        return matrix  # finite, non-zero, with a direction: the checks below would pass
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        raise VectorError(f"{label(int(np.argmin(finite)))} has a value outside the float32 range")
    zero = ~matrix.any(axis=1)
    if zero.any():
        raise VectorError(f"{label(int(np.argmax(zero)))} is all zeros")
    bad = first_unusable_row(matrix)
    if bad is not None:
        raise VectorError(
            f"{label(bad)} is too close to zero to have a direction (L2 norm below {MIN_NORM:g})"
        )
    return matrix
