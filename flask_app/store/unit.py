"""Unit-length rows: the only vectors a collection stores (scores are cosines)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]

# Below this L2 norm a vector has no usable direction (e.g. [1e-30] * 384):
# normalising it would amplify rounding noise, so it is refused instead.
MIN_NORM = 1e-12


def unit_rows(vectors: Vectors) -> tuple[Vectors, int | None]:
    """Rows scaled to unit length, computed in float64 so that neither huge
    (1e30) nor tiny components overflow or vanish; the second value is the
    first row that cannot be normalised (a non-finite value, or a norm below
    MIN_NORM), None when every row is fine."""
    wide = vectors.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(wide, axis=1)
    bad = ~np.isfinite(norms) | (norms < MIN_NORM)
    if bad.any():
        return vectors, int(np.argmax(bad))
    out: Vectors = (wide / norms[:, None]).astype(np.float32)
    return out, None
