"""Keep the daemon's resident memory close to what it holds (glibc's allocator).

The recommendation round reads up to 30 minutes of the store in a worker thread every
[cost].evaluate_every; glibc keeps what such a read freed in that thread's arena, and with one
arena per worker thread the RSS grew with the window (about 45 MB/h for the first 30 minutes on
the demo host, bench/soak.py). Two arenas at most, and a malloc_trim after each round, give
that memory back. Elsewhere than glibc both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Any

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's mallopt parameter
ARENAS = 2


def _libc() -> Any | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return None


_LIBC = _libc()


def limit_arenas(arenas: int = ARENAS) -> None:
    """At most `arenas` malloc arenas for the threads started from now on."""
    if _LIBC is not None:
        _LIBC.mallopt(M_ARENA_MAX, arenas)


def trim() -> None:
    """Return the free memory at the top of every arena to the OS (a few ms)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
