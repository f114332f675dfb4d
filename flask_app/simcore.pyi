"""simcore: exact top-k inner-product search (Rust extension)."""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["DimensionMismatchError", "NonFiniteError", "SimcoreValueError", "top_k"]

class SimcoreValueError(ValueError):
    """Invalid input to simcore."""

class DimensionMismatchError(SimcoreValueError):
    """A vector has the wrong dimension."""

class NonFiniteError(SimcoreValueError):
    """An input holds NaN or infinity."""

def top_k(
    rows: npt.ArrayLike | Sequence[Sequence[float]],
    query: npt.ArrayLike | Sequence[float],
    k: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Exact top-k rows of `rows` (n x d) by inner product with `query` (d).

    Returns (row indices, scores), best first; ties go to the lower row.
    """
