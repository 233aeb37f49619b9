"""What happened to a store since it was opened: the writer counts it, `mlcostd check` and
/v1/health report it. Its own module so that the writer and its housekeeping
(daemon.store.maintenance) both use it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass
class StoreHealth:
    """What happened to the store since it was opened; reported by `mlcostd check` and /v1/health."""

    path: str
    schema_version: int = 0
    corrupt_moved_aside: str | None = None
    ticks_written: int = 0
    writes_failed: int = 0  # write attempts (transactions) that failed
    samples_buffered: int = 0  # waiting in memory now
    samples_dropped: int = 0  # lost: buffer overflow or a sample SQLite rejected
    last_error: str | None = None  # the latest error, while the store has not worked since
    # last_error once the store worked again after it (a write and a housekeeping round went
    # through), and when: history, not what is wrong now (probe 142 L5)
    resolved_error: str | None = None
    resolved_at: float | None = None
    rows_pruned: int = 0
    bytes_on_disk: int = 0  # database + WAL
    problem: str | None = None  # what stops recording now (disk full, ...); None when all is well
    facts_pending: int = 0  # events, stack samples, ... waiting in memory to be written
    facts_dropped: int = 0  # lost: the pending list overflowed or SQLite rejected one
    recreated: str | None = None  # the database was deleted or replaced and recreated: when, how

    def as_dict(self) -> dict[str, object]:
        # Every field is a str, a number or None: a flat copy is what dataclasses.asdict gives,
        # at a fiftieth of its cost (/v1/now and /v1/health ask on every call).
        return dict(vars(self))

    def copy(self) -> StoreHealth:
        """A copy (flat: every field is a value), to hand out while the writer counts on."""
        return replace(self)
