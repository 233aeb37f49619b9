"""What waits while the store cannot be written, and how that condition is told.

`PendingWrites` is a mixin of `daemon.store.writer.Store` (like `Maintenance` and
`DatabaseFile`), working on the Store's state under the Store's lock. Ticks that cannot be
committed wait in the Store's bounded buffer (`_trim_buffer` drops the oldest past the bound);
fact upserts (events, stack samples, recommendations, host facts: daemon.store.facts) wait keyed
in a bounded pending list and are written after the buffered ticks. A condition that stops
writing (disk full, I/O error) is logged once when it starts, then at most once a minute with
how many more came, and once when it clears; `StoreHealth.problem` says it while it lasts.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sqlite3
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator, Sequence
from contextlib import AbstractContextManager
from operator import itemgetter
from typing import TYPE_CHECKING

from daemon.store.errors import (
    REFUSED_WRITE,
    SQLITE_FULL,
    TRANSIENT,
    error_code,
    free_bytes,
    is_corruption,
    refused_write_advice,
)
from daemon.store.facts import event_write
from daemon.store.schema import TICKS_DROPPED

if TYPE_CHECKING:
    from daemon.sources.sample import Sample
    from daemon.store.health import StoreHealth

log = logging.getLogger("daemon.store.writer")  # the Store's log, as before this code moved here

LOG_EVERY_S = 60.0  # a lasting condition is logged again at most this often
PENDING_FACTS_LIMIT = 5000  # fact upserts kept in memory while the store cannot be written
# One fact write: (key: a later write with the same key supersedes it, SQL, parameters).
FactWrite = tuple[Hashable, str, Sequence[object]]


def ticks_waiting(count: int) -> str:
    """"N ticks wait", in words that fit N."""
    if count == 0:
        return "no tick waits"
    return "1 tick waits" if count == 1 else f"{count} ticks wait"


class PendingWrites:
    """The Store's writes that wait, and the problem that makes them wait."""

    if TYPE_CHECKING:  # the Store's state this mixin works on (set in Store.__init__)
        path: str
        buffer_limit: int
        _health: StoreHealth
        _buffer: deque[tuple[int, Sample]]
        _pending_facts: OrderedDict[Hashable, tuple[str, Sequence[object]]]
        _problem_kind: str | None
        _problem_logged_at: float
        _problem_repeats: int
        _batching: int  # open facts_batched() blocks: their fact writes wait for the last
        _lock: threading.Lock
        _damage_noted: str | None  # the file is damaged: nothing is written until a new one
        _dropped_span: list[int] | None  # [first ts, last ts, count] of the ticks dropped lately

        def _flush(self) -> None: ...
        def _transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def write_facts(self, writes: Sequence[FactWrite]) -> bool:
        """Run fact upserts in one transaction; caller holds _lock. Never raises. When the
        store cannot be written now they wait (a later write of the same key replaces the
        waiting one) and go in after the buffered ticks. True when written now."""
        if not writes:
            return True
        if self._buffer or self._pending_facts or self._batching or self._damage_noted:
            # keep the order: ticks, older facts, these
            for key, sql, params in writes:
                self._queue_fact(key, sql, params)
            if not self._buffer and not self._batching:
                self._flush()
            return False
        try:
            self._run_facts([(sql, params) for _, sql, params in writes])
        except sqlite3.Error as error:
            damaged = isinstance(error, sqlite3.DatabaseError) and is_corruption(error)
            if damaged:
                self._damage_noted = str(error)  # the file's fault: a new one next round
            if damaged or error_code(error) in TRANSIENT:
                for key, sql, params in writes:
                    self._queue_fact(key, sql, params)
                self._write_failed(error)
            else:
                self._health.facts_dropped += len(writes)
                self._health.last_error = f"a fact write was rejected: {error}"
                log.warning("the store rejected a write (%s); it is dropped", error)
            return False
        return True

    @contextlib.contextmanager
    def facts_batched(self) -> Iterator[None]:
        """Fact writes made inside (by any thread) wait, and go in together in one transaction
        on the way out: a tick's events and stack samples cost one commit, not one each (at
        256 processes ~10 a tick). What cannot be written then waits as any fact does."""
        with self._lock:
            self._batching += 1
        try:
            yield
        finally:
            with self._lock:
                self._batching -= 1
                if not self._batching and not self._buffer and self._pending_facts:
                    self._flush()

    def _run_facts(self, statements: Sequence[tuple[str, Sequence[object]]]) -> None:
        with self._transaction() as conn:
            # in order; a run of the same statement (a tick's stack samples) bound in one call
            for sql, run in itertools.groupby(statements, key=itemgetter(0)):
                conn.executemany(sql, [params for _, params in run])

    def _queue_fact(self, key: Hashable, sql: str, params: Sequence[object]) -> None:
        self._pending_facts.pop(key, None)
        self._pending_facts[key] = (sql, params)
        while len(self._pending_facts) > PENDING_FACTS_LIMIT:
            self._pending_facts.popitem(last=False)
            self._health.facts_dropped += 1
        self._health.facts_pending = len(self._pending_facts)

    def _flush_facts(self) -> None:
        """Write the waiting facts, oldest first (at most 1000 a call). Caller holds _lock."""
        while self._pending_facts and self._damage_noted is None:
            keys = list(itertools.islice(self._pending_facts, 1000))
            try:
                self._run_facts([self._pending_facts[k] for k in keys])
            except sqlite3.Error as error:
                if isinstance(error, sqlite3.DatabaseError) and is_corruption(error):
                    self._damage_noted = str(error)  # the file's fault: a new one next round
                    break
                if error_code(error) in TRANSIENT:
                    self._write_failed(error)
                    break
                # one of them can never be written: write them one by one, drop the bad ones
                for key in keys:
                    try:
                        self._run_facts([self._pending_facts[key]])
                    except sqlite3.Error as one:
                        if error_code(one) in TRANSIENT:
                            self._write_failed(one)
                            self._health.facts_pending = len(self._pending_facts)
                            return
                        self._health.facts_dropped += 1
                        self._health.last_error = f"a fact write was rejected: {one}"
                    del self._pending_facts[key]
                continue
            for key in keys:
                del self._pending_facts[key]
        self._health.facts_pending = len(self._pending_facts)

    def _trim_buffer(self) -> None:
        dropped: list[int] = []
        while len(self._buffer) > self.buffer_limit:
            dropped.append(self._buffer.popleft()[0])
            self._health.samples_dropped += 1
        self._health.samples_buffered = len(self._buffer)
        if dropped:
            if self._dropped_span is None:  # the first drop of a span is said at once; its
                # count when writes work again (_flush). The once-a-minute line missed a span
                # that began after it and ended before the next (probe 142 M1).
                log.error("the store %s could not be written for so long that the ticks "
                          "waiting in memory reached their bound (%d): the oldest are dropped, "
                          "not recorded, until it can be written again", self.path,
                          self.buffer_limit)
            self._note_dropped(dropped[0], dropped[-1], len(dropped))

    def _note_dropped(self, first_ms: int, last_ms: int, count: int) -> None:
        """Ticks dropped from the bound of memory (a full disk that lasted): a TICKS_DROPPED
        event of the store over the span, written once writes work again, so a report of the
        range says so (it said nothing: its samples only covered less time). One event per
        span of drops, its end and count updated as more go."""
        span = self._dropped_span
        if span is None:
            span = self._dropped_span = [first_ms, last_ms, 0]
        span[1] = last_ms
        span[2] += count
        self._queue_fact(*event_write({
            "kind": TICKS_DROPPED, "target": "store", "started_at": span[0] / 1000,
            "ended_at": span[1] / 1000, "cost_so_far": None,
            "detail": {"ticks": span[2], "why": self._health.problem or ""}}))

    def _write_failed(self, error: BaseException) -> None:
        """A write failed for a "not now" reason: say so (rate-limited) and in health."""
        self._health.writes_failed += 1
        self._health.last_error = f"write failed: {error}"
        code = error_code(error)
        # this tick is in the buffer until _trim_buffer drops the oldest past the bound
        count = min(len(self._buffer), self.buffer_limit)
        if count == 0:  # (a fact write at start, before the first tick)
            waiting = (f"ticks wait in memory until it can be written (none yet; at most "
                       f"{self.buffer_limit})")
        else:
            waiting = (f"{ticks_waiting(count)} in memory (at most {self.buffer_limit}; "
                       f"{self._health.samples_dropped} dropped so far) and "
                       f"{'is' if count == 1 else 'are'} written when it can")
        if code == SQLITE_FULL:
            text = (f"cannot write the store {self.path}: the disk is full "
                    f"({free_bytes(self.path)} bytes free); {waiting}; free space on that disk "
                    "and keep mlcostd running meanwhile (stopped, the ticks waiting are lost; "
                    "a lower [store].max_size needs a restart and room to delete in)")
        elif code in REFUSED_WRITE:  # (an immutable file reads as "disk I/O error")
            text = (f"cannot write the store {self.path}: {error}; "
                    f"{refused_write_advice(self.path)}; {waiting}")
        else:
            text = f"cannot write the store {self.path}: {error}; {waiting}"
        self._set_problem(f"write:{code}", text)

    def _set_problem(self, kind: str, text: str) -> None:
        self._health.problem = text
        now = time.monotonic()
        if kind != self._problem_kind:
            self._problem_kind = kind
            self._problem_logged_at = now
            self._problem_repeats = 0
            log.error("%s", text)
            return
        self._problem_repeats += 1
        if now - self._problem_logged_at >= LOG_EVERY_S:
            log.error("%s (%d more like this)", text, self._problem_repeats)
            self._problem_logged_at = now
            self._problem_repeats = 0

    def _clear_problem(self, how: str) -> None:
        if self._problem_kind is None:
            return
        log.warning("recording into %s again: %s", self.path, how)
        self._problem_kind = None
        self._problem_repeats = 0
        self._health.problem = None
