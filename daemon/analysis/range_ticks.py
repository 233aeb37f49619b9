"""The ticks a range's spend is recomputed from, one definition for `mlcostd report`, the
snapshot page and `mlcost-top --replay`.

Each tick charges the interval before it, and the first tick after a daemon start charges
nothing (daemon.analysis.ledger). A range read as an even spread of its ticks (a long one: a
page or a replay keeps its cost bounded) charged nothing before the first tick it picked, after
the last, nor from the last it picked before a restart to the first after it: the page and the
replay of probe 126's snapshot read $15.53 for the $15.64 the report (and the live ledger)
charged. So the spread is read with the range's own first and last ticks and the ticks on
either side of each daemon start in it: at most 2 + 2 x RUN_EDGES_MAX single-tick reads more.
And with the two ticks of each recording gap inside a run (the daemon stalled, the host
suspended; GAPS_MAX of them), whose interval a replay caps at the ledger's minute (`gap_ends`)
where its own cap, widened to the spread's step, charged a stall whole (probe 153).
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.analysis.ledger import MAX_TICK_GAP_S
from daemon.sources.sample import Sample
from daemon.store.reader import StoreReader
from daemon.store.schema import MINUTE

RUN_EDGES_MAX = 200  # daemon starts in a range whose edge ticks are added (each two reads)
GAPS_MAX = 200  # recording gaps in a range whose edge ticks are added (the longest first)


def edge_ticks(reader: StoreReader, start: float, end: float, starts: Sequence[float],
               gaps: Sequence[tuple[int, int]] | None = None) -> set[int]:
    """The times (ms) of the range's first and last ticks, of the two ticks of each recording
    gap inside a run in it (`recording_gaps`) and, for each daemon start in it (the first
    RUN_EDGES_MAX), of the last tick before it and the first at or after it. `gaps`: the
    recording gaps as the caller read them (those of ticks in the range count), else read."""
    lo, hi = round(start * 1000), round(end * 1000)
    row = reader.query("SELECT (SELECT min(ts) FROM ticks WHERE ts >= ? AND ts <= ?) AS first, "
                       "(SELECT max(ts) FROM ticks WHERE ts >= ? AND ts <= ?) AS last",
                       (lo, hi, lo, hi))[0]
    edges = {ts for ts in (row["first"], row["last"]) if type(ts) is int}
    edges.update(ts for gap in (recording_gaps(reader, start, end) if gaps is None else gaps)
                 for ts in gap if lo <= ts <= hi)
    for at in [s for s in starts if start < s <= end][:RUN_EDGES_MAX]:
        ms = round(at * 1000)
        row = reader.query("SELECT (SELECT max(ts) FROM ticks WHERE ts >= ? AND ts < ?) AS last, "
                           "(SELECT min(ts) FROM ticks WHERE ts >= ? AND ts <= ?) AS first",
                           (lo, ms, ms, hi))[0]
        edges.update(ts for ts in (row["last"], row["first"]) if type(ts) is int)
    return edges


def with_edges(reader: StoreReader, samples: Sequence[Sample], start: float, end: float,
               starts: Sequence[float],
               gaps: Sequence[tuple[int, int]] | None = None) -> list[Sample]:
    """`samples` (an even spread of the range's ticks, oldest first) with the range's edge
    ticks (`edge_ticks`; `gaps`: its recording gaps as the caller read them, else read) the
    spread skipped, oldest first."""
    have = {round(sample.ts * 1000) for sample in samples}
    out = list(samples)
    missing = sorted(edge_ticks(reader, start, end, starts, gaps) - have)
    for ts in missing:
        out += reader.samples(ts / 1000, ts / 1000, max_samples=1)
    if missing:
        out.sort(key=lambda sample: sample.ts)
    return out


def recording_gaps(reader: StoreReader, start: float, end: float,
                   max_gap_s: float = MAX_TICK_GAP_S) -> list[tuple[int, int]]:
    """The gaps inside runs among the range's ticks longer than `max_gap_s` (the daemon
    stalled, the host suspended: the ledger charged the first `max_gap_s` of each and counted
    the rest unaccounted): (the tick before, the tick after, ms), the GAPS_MAX longest, oldest
    first. One read of the range's tick times (a 6 h range at 1 s: 21 600 of them, in SQL). A
    replay that reads an even spread of the range's ticks, further apart than the ledger's cap,
    keeps these two ticks of each to charge the gap as the ledger did (probe 153: a 3 h report
    charged the whole 105 s of a stall whose 45.7 s the ledger left unaccounted)."""
    rows = reader.rows(
        "SELECT prev, ts FROM (SELECT ts, lag(ts) OVER (ORDER BY ts) AS prev FROM ticks "
        "WHERE ts >= ? AND ts <= ?) WHERE ts - prev > ? ORDER BY ts - prev DESC LIMIT ?",
        (round(start * 1000), round(end * 1000), round(max_gap_s * 1000), GAPS_MAX))
    return sorted((prev, ts) for prev, ts in rows if type(prev) is int and type(ts) is int)


def tick_before(reader: StoreReader, start: float) -> float | None:
    """The last tick at or before `start` (None: none): a range's first tick after its start
    is charged the interval from it, as the ledger charged it (and the review places it), so
    two adjacent ranges add up to their union (probe 153 M2)."""
    found = reader.rows("SELECT max(ts) FROM ticks WHERE ts <= ?", (round(start * 1000),))[0][0]
    return found / 1000 if type(found) is int else None


NOT_RECORDED_STARTS_MAX = 5000  # daemon starts a range's time between runs is read around


def not_recorded_s(reader: StoreReader, start: float, end: float, starts: Sequence[float],
                   recorded: tuple[float, float] | None) -> float:
    """The seconds of [start, end] inside the store's `recorded` range (queries.recorded_range)
    that no daemon recorded: from each run's last tick to the next run's first (`starts`: the
    daemon starts, run_starts, with the last one before the range), the time the ledger
    charges nothing and does not count as unaccounted (the daemon stopped, and started again:
    its own start up to its first tick too). The time before the store's first record is not
    counted (nothing says the host ran then), nor after its last. Where retention removed the
    raw ticks around a start, the minute rollups place it, to the minute."""
    if recorded is None:
        return 0.0
    lo, hi = max(start, recorded[0]), min(end, recorded[1])
    if hi <= lo:
        return 0.0
    before = [s for s in starts if s <= lo]
    chosen = sorted({*before[-1:], *(s for s in starts if lo < s <= hi)})
    gaps: set[tuple[float, float]] = set()
    for at in chosen[:NOT_RECORDED_STARTS_MAX]:
        if at <= recorded[0]:
            continue  # the store's first run: nothing recorded before it
        ms = round(at * 1000)
        row = reader.query("SELECT (SELECT max(ts) FROM ticks WHERE ts < ?) AS last, "
                           "(SELECT min(ts) FROM ticks WHERE ts >= ?) AS first", (ms, ms))[0]
        last, first = row["last"], row["first"]
        if type(last) is not int:  # its ticks before were removed: their minutes place it
            # (the last run's from the end of the last minute before the start's, the next
            # from the start, or from its first minute after it)
            minute = ms - ms % (MINUTE * 1000)
            row = reader.query(
                "SELECT (SELECT max(bucket) FROM rollups WHERE res = ? AND bucket < ?) AS last, "
                "(SELECT min(bucket) FROM rollups WHERE res = ? AND bucket >= ?) AS first",
                (MINUTE, minute, MINUTE, minute))[0]
            if type(row["last"]) is not int or type(row["first"]) is not int:
                continue
            last, first = min(row["last"] + MINUTE * 1000, ms), max(row["first"], ms)
        elif type(first) is not int:
            continue  # no tick after it: the store's range ends before it
        gaps.add((last / 1000, first / 1000))
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in gaps)
