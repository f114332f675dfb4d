"""glibc's allocator set up for a long-running server of many threads.

Every thread that allocates may get its own malloc arena (up to 8 per core),
and freed memory stays in the arena that held it: with 16 HTTP threads,
llama.cpp's OpenMP helpers and the embedder's BLAS threads the server's
resident memory kept pages nobody used. Two arenas, and handing free pages
back after each generation, cost no measurable speed (docs/performance.md,
Memory). Other C libraries (musl) are left alone.
"""

from __future__ import annotations

import ctypes
import os

_M_ARENA_MAX = -8  # glibc's mallopt parameter


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018  # glibc has it; others may not
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _glibc()


def limit_arenas(arenas: int = 2) -> None:
    """At most `arenas` malloc arenas (before the threads start); an explicit
    MALLOC_ARENA_MAX in the environment wins."""
    if _LIBC is not None and "MALLOC_ARENA_MAX" not in os.environ:
        _LIBC.mallopt(_M_ARENA_MAX, arenas)


def release_free_memory() -> None:
    """Give freed heap pages back to the system (a few ms at most)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
