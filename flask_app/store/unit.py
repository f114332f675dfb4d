"""Unit-length rows: the only vectors a collection stores (scores are cosines)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]

# Below this L2 norm a vector has no usable direction (e.g. [1e-30] * 384):
# normalising it would amplify rounding noise, so it is refused instead.
MIN_NORM = 1e-12

# Norms float32 squares measure exactly enough: outside, a component's square
# overflows or becomes subnormal, and the row is measured again in float64.
_F32_SAFE = (1e-15, 1e15)
_NO_ROWS: npt.NDArray[np.float64] = np.empty(0)
_NO_ODD: npt.NDArray[np.intp] = np.empty(0, dtype=np.intp)


@dataclass(frozen=True)
class _Norms:
    rows: Vectors  # float32, contiguous
    norms: npt.NDArray[np.float32]  # 1.0 at the odd rows
    odd: npt.NDArray[np.intp]  # rows measured in float64
    wide: npt.NDArray[np.float64]  # those rows in float64
    wide_norms: npt.NDArray[np.float64]
    bad: int | None  # the first row without a usable direction


def _measure(vectors: Vectors) -> _Norms:
    """L2 norms in float32 (pairwise sums, ~4x faster than float64 on large
    batches); rows with huge (1e30) or tiny components, or non-finite ones,
    measured in float64 so that nothing overflows or vanishes."""
    rows = np.ascontiguousarray(vectors, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        norms = np.linalg.norm(rows, axis=1)
    lo, hi = _F32_SAFE
    if len(norms) == 1 and lo < float(norms[0]) < hi:  # one query: no array compares
        return _Norms(rows, norms, _NO_ODD, _NO_ROWS, _NO_ROWS, None)
    odd = np.flatnonzero(~((norms > lo) & (norms < hi)))  # NaN is odd too
    if not odd.size:  # the usual case: nothing to measure again (one query: ~10 µs)
        return _Norms(rows, norms, odd, _NO_ROWS, _NO_ROWS, None)
    wide = rows[odd].astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        wide_norms = np.linalg.norm(wide, axis=1)
    unusable = ~np.isfinite(wide_norms) | (wide_norms < MIN_NORM)
    bad = int(odd[np.argmax(unusable)]) if unusable.any() else None
    norms[odd] = 1.0
    return _Norms(rows, norms, odd, wide, wide_norms, bad)


def all_measurable(vectors: Vectors) -> bool:
    """Every row's float32 norm is in the safe range: each row is finite, not
    all zeros, and has a direction (the usual case, checked in one pass)."""
    return not _measure(vectors).odd.size


def first_unusable_row(vectors: Vectors) -> int | None:
    """The first row that cannot be normalised (a non-finite value, or a norm
    below MIN_NORM); None when every row can."""
    return _measure(vectors).bad


def unit_rows(vectors: Vectors) -> tuple[Vectors, int | None]:
    """Rows scaled to unit length; the second value is `first_unusable_row`
    (the rows are then returned as given)."""
    m = _measure(vectors)
    if m.bad is not None:
        return vectors, m.bad
    out: Vectors = m.rows / m.norms[:, None]
    if m.odd.size:
        out[m.odd] = (m.wide / m.wide_norms[:, None]).astype(np.float32)
    return out, None
