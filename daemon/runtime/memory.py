"""Keep the daemon's resident memory close to what it holds (glibc's allocator), and its
garbage collector's CPU in proportion to the garbage.

The recommendation round reads up to 30 minutes of the store in a worker thread every
[cost].evaluate_every; glibc keeps what such a read freed in that thread's arena, and with one
arena per worker thread the RSS grew with the window (about 45 MB/h for the first 30 minutes on
the demo host, bench/soak.py). Two arenas at most, and a malloc_trim after each round, give
that memory back. Elsewhere than glibc both are no-ops.

Python's cycle collector runs a young collection every 700 container objects allocated and not
yet freed, and now and then a full one over every object the process holds. A tick at 256
processes leaves ~5,000 such objects for a moment (samples, models, the /v1/now document), so
it ran ~8 young and ~0.7 middle collections a tick, and a full one (~25 ms over what start-up
imported) every ten ticks: 3-5 ms of the tick's ~37 ms (bench/collector.py --procs 256).
While the daemon runs, a young collection waits for GC_YOUNG_THRESHOLD objects and what start-up
built is frozen (gc.freeze: kept out of every collection; freed as usual when its count drops):
~0.15 ms a tick. Almost nothing the tick builds is cyclic, so the garbage left waiting is small.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's mallopt parameter
ARENAS = 2
GC_YOUNG_THRESHOLD = 10_000  # objects allocated and not freed before a young collection


def _libc() -> Any | None:
    try:
        # the process's own symbols (libc's among them): ctypes.util.find_library would run
        # `ldconfig -p` in a child process at every start, before any refusal (a child of the
        # daemon that a start-up error was said not to have left)
        libc = ctypes.CDLL(None)
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


@contextlib.contextmanager
def collector_tuned() -> Iterator[None]:
    """While the daemon runs: young collections every GC_YOUNG_THRESHOLD objects (see the module
    docstring). On the way out, what `freeze_start_up` froze goes back to the collector and the
    thresholds are as they were (a daemon run inside a test, or a profile, leaves no trace)."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], GC_YOUNG_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def freeze_start_up() -> None:
    """Keep everything built so far (modules, config, catalog, the API) out of later
    collections: a full collection then walks what the daemon holds since, not all it imported."""
    gc.freeze()
