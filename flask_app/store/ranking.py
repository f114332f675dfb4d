"""One order for every search: higher score first, equal scores by id — in
one collection and over a cluster's shards alike (a shard's rows are in its
own insertion order, so the index's tie-break, the earlier row, cannot be
reproduced across shards; an id can).

An f32 index ranks by the exact score. An int8 or binary index keeps its
best k × oversample candidates by the approximate score, then ranks them by
the exact one. Both steps use this order, but for a binary index's cut of
its candidates (see `candidates`): the index is asked for more than the cut,
and for twice as many until the last it returns scores below the cut, so
every candidate scoring at least the cut is seen before it is made.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from flask_app import simcore
from flask_app.index_kinds import INDEX_KINDS

# (id, approximate score, exact score); for f32 both scores are the exact one
Candidate = tuple[str, float, float]


def candidates(
    index: simcore.Index, query: npt.ArrayLike, k: int, kind: str, allow: list[str] | None
) -> list[Candidate]:
    """The best `k × oversample` (f32: `k`) by approximate score, then id."""
    mode, oversample = INDEX_KINDS[kind]
    if mode == "binary":
        # sign-bit distances are small integers that tie at nearly every cut:
        # a cut by id would cost a second scan each time, so binary candidates
        # are cut in the index's own order (equally distant: the earlier row)
        return _fetched(index, query, k, mode, oversample, allow)
    step = 1 if mode == "exact" else oversample  # candidates simcore returns per k
    wanted = k * step
    ask = k + 1
    while True:
        found = _fetched(index, query, ask, mode, oversample, allow)
        # complete once the index ran out or the last one scores below the cut
        if len(found) < ask * step or found[-1][1] < found[wanted - 1][1]:
            return cut(found, wanted)
        ask *= 2


def top(
    index: simcore.Index, query: npt.ArrayLike, k: int, kind: str, allow: list[str] | None
) -> list[Candidate]:
    """`best(candidates(...), k)`. A binary index's k × 40 candidates are
    narrowed in NumPy to those scoring at least the k-th best exact score
    (every one of the best k does) before any is made a Python tuple."""
    mode, oversample = INDEX_KINDS[kind]
    if mode != "binary":
        return best(candidates(index, query, k, kind, allow), k)
    ids, approx, exact = index.rescorable(query, k, mode=mode, oversample=oversample, allow=allow)
    keep: Sequence[int] = range(len(ids))
    if len(ids) > k:
        kth = np.partition(exact, len(ids) - k)[len(ids) - k]
        keep = np.flatnonzero(exact >= kth).tolist()
    return best([(ids[i], float(approx[i]), float(exact[i])) for i in keep], k)


def _fetched(
    index: simcore.Index,
    query: npt.ArrayLike,
    k: int,
    mode: str,
    oversample: int,
    allow: list[str] | None,
) -> list[Candidate]:
    ids, approx, exact = index.rescorable(query, k, mode=mode, oversample=oversample, allow=allow)
    return list(zip(ids, approx.tolist(), exact.tolist(), strict=True))


def cut(found: list[Candidate], wanted: int) -> list[Candidate]:
    """The best `wanted` by approximate score, then id."""
    return sorted(found, key=lambda c: (-c[1], c[0]))[:wanted]


def best(found: list[Candidate], k: int) -> list[Candidate]:
    """The best `k` by exact score, then id."""
    return sorted(found, key=lambda c: (-c[2], c[0]))[:k]
