"""simcore: exact top-k inner-product search (Rust extension)."""

import os
import pathlib
from collections.abc import Sequence
from typing import final

import numpy as np
import numpy.typing as npt

__all__ = [
    "DimensionMismatchError",
    "Index",
    "NonFiniteError",
    "SimcoreValueError",
    "matrix_from_lists",
    "popcount_kernel",
    "quantize_max_scale",
    "quantize_min_max",
    "reduce_dims",
    "simd_level",
    "split_upload",
    "supported_simd_levels",
    "top_k",
]

_Vector = npt.ArrayLike | Sequence[float]
_Matrix = npt.ArrayLike | Sequence[Sequence[float]]

class SimcoreValueError(ValueError):
    """Invalid input to simcore."""

class DimensionMismatchError(SimcoreValueError):
    """A vector has the wrong dimension."""

class NonFiniteError(SimcoreValueError):
    """An input holds NaN or infinity."""

def top_k(
    rows: _Matrix, query: _Vector, k: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Exact top-k rows of `rows` (n x d) by inner product with `query` (d).

    Returns (row indices, scores), best first; ties go to the lower row.
    """

def quantize_max_scale(x: _Vector) -> npt.NDArray[np.int8]:
    """max-scale int8 codes in [-127, 127] (Lucidworks `vectorQuantizationMethod`)."""

def quantize_min_max(x: _Vector) -> npt.NDArray[np.uint8]:
    """min-max uint8 codes in [0, 255]."""

def reduce_dims(x: _Vector, n: int) -> npt.NDArray[np.float32]:
    """Keep the first `n` dimensions and L2-normalise them."""

def matrix_from_lists(
    rows: Sequence[Sequence[float]], label: str = "rows[{}]"
) -> npt.NDArray[np.float32]:
    """Rows of numbers (lists of Python ints/floats, as parsed from JSON) as an
    (n, d) float32 array, strictly: booleans, strings and other types are
    rejected, rows must be equally long, values must fit in float32.
    `label` names a row in errors, "{}" standing for its index
    (e.g. "items[{}].vector").
    """

def split_upload(
    body: bytes,
) -> tuple[str, bytes, npt.NDArray[np.float32] | None, str | None] | None:
    """A JSON upload body split in one pass, the GIL released: the items'
    vectors as one (n, d) float32 array, and the body without them.
    Returns (field, rest, vectors or None, problem or None), or None for a
    body it does not handle (see `upload::split_upload`).
    """

def simd_level() -> str:
    """The SIMD level in use (capped by the SIMCORE_SIMD environment variable)."""

def popcount_kernel() -> str:
    """The popcount the binary (Hamming) scan uses: vpopcntdq, avx2, cnt (NEON) or scalar."""

def supported_simd_levels() -> list[str]:
    """Every SIMD level this machine supports, slowest first."""

@final
class Index:
    """A collection's vectors: string ids, upsert/delete, exact top-k search.
    Thread-safe: searches run in parallel (without the GIL), writes are
    exclusive.
    """

    def __new__(cls, dim: int) -> Index: ...
    @staticmethod
    def create(path: str | os.PathLike[str], dim: int) -> Index:
        """Create an empty persistent index in directory `path`."""
    @staticmethod
    def open(path: str | os.PathLike[str]) -> Index:
        """Open the persistent index in directory `path`."""
    @property
    def dim(self) -> int: ...
    @property
    def rows(self) -> int:
        """Stored rows including deleted ones (what a scan reads)."""
    @property
    def deleted_rows(self) -> int: ...
    @property
    def path(self) -> pathlib.Path | None: ...
    @property
    def threads(self) -> int:
        """Threads one search may use (default: available cores)."""
    @threads.setter
    def threads(self, value: int) -> None: ...
    @property
    def scan_bytes(self) -> tuple[int, int]:
        """Bytes an exact (f32) and an int8 scan read."""
    def __len__(self) -> int: ...
    def __contains__(self, key: str, /) -> bool: ...
    def get(self, id: str) -> npt.NDArray[np.float32] | None:
        """The stored vector of `id`, or None."""
    def upsert(self, ids: Sequence[str], vectors: _Matrix) -> tuple[int, int]:
        """Insert or replace `vectors` (n x dim) under `ids` (n strings).
        Returns (inserted, replaced). The whole batch is validated first.
        `stage_upsert` then `publish`.
        """
    def stage_upsert(self, ids: Sequence[str], vectors: _Matrix) -> None:
        """Validate, encode and (when persistent) durably append `vectors`
        under `ids` without making them visible: searches go on meanwhile
        and do not see them until `publish`. Until then another stage, a
        delete or a compaction is refused.
        """
    def publish(self) -> tuple[int, int] | None:
        """Make the staged upsert visible (brief exclusive access). Returns
        (inserted, replaced), or None when nothing is staged.
        """
    @property
    def has_staged(self) -> bool:
        """True while a staged upsert waits for `publish`."""
    def delete(self, ids: Sequence[str]) -> list[bool]:
        """Delete ids; returns, per id, whether it was present."""
    def compact(self) -> bool:
        """Drop deleted rows from storage. Searches go on while the live rows
        are rewritten (read access); only the switch to them excludes them.
        Returns false, changing nothing, when a write came in between.
        """
    def build_binary(self) -> None:
        """Build the sign-bit codes binary searches scan (in memory, derived
        from the f32 rows, kept up to date by later writes)."""
    @property
    def binary_bytes(self) -> int:
        """Bytes the sign-bit codes hold in memory (0 when not built)."""
    def search(
        self,
        query: _Vector,
        k: int,
        *,
        mode: str = "exact",
        oversample: int = 4,
        allow: Sequence[str] | None = None,
    ) -> tuple[list[str], npt.NDArray[np.float32]]:
        """Top-k ids and scores for `query`, best first (ties: earlier insert)."""
    def rescorable(
        self,
        query: _Vector,
        k: int,
        *,
        mode: str = "exact",
        oversample: int = 4,
        allow: Sequence[str] | None = None,
    ) -> tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """The candidates `search` rescores (int8, binary: the best k x
        oversample by the approximate score; exact: the top k), best first,
        with their approximate and exact scores."""
    def search_batch(
        self, queries: _Matrix, k: int, *, mode: str = "exact", oversample: int = 4
    ) -> list[tuple[list[str], npt.NDArray[np.float32]]]:
        """Top-k for each row of `queries` (nq x dim) in one pass over memory."""
    def read_baseline(self, threads: int | None = None) -> float:
        """Sum every stored f32 value: a SIMD memory-read baseline."""
