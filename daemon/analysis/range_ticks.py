"""The ticks a range's spend is recomputed from, one definition for `mlcostd report`, the
snapshot page and `mlcost-top --replay`.

Each tick charges the interval before it, and the first tick after a daemon start charges
nothing (daemon.analysis.ledger). A range read as an even spread of its ticks (a long one: a
page or a replay keeps its cost bounded) charged nothing before the first tick it picked, after
the last, nor from the last it picked before a restart to the first after it: the page and the
replay of probe 126's snapshot read $15.53 for the $15.64 the report (and the live ledger)
charged. So the spread is read with the range's own first and last ticks and the ticks on
either side of each daemon start in it: at most 2 + 2 x RUN_EDGES_MAX single-tick reads more.
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.sources.sample import Sample
from daemon.store.reader import StoreReader

RUN_EDGES_MAX = 200  # daemon starts in a range whose edge ticks are added (each two reads)
GAPS_MAX = 200  # recording gaps in a range whose edge ticks are added (the longest first)


def edge_ticks(reader: StoreReader, start: float, end: float,
               starts: Sequence[float]) -> set[int]:
    """The times (ms) of the range's first and last ticks and, for each daemon start in it
    (the first RUN_EDGES_MAX), of the last tick before it and the first at or after it."""
    lo, hi = round(start * 1000), round(end * 1000)
    row = reader.query("SELECT (SELECT min(ts) FROM ticks WHERE ts >= ? AND ts <= ?) AS first, "
                       "(SELECT max(ts) FROM ticks WHERE ts >= ? AND ts <= ?) AS last",
                       (lo, hi, lo, hi))[0]
    edges = {ts for ts in (row["first"], row["last"]) if type(ts) is int}
    for at in [s for s in starts if start < s <= end][:RUN_EDGES_MAX]:
        ms = round(at * 1000)
        row = reader.query("SELECT (SELECT max(ts) FROM ticks WHERE ts >= ? AND ts < ?) AS last, "
                           "(SELECT min(ts) FROM ticks WHERE ts >= ? AND ts <= ?) AS first",
                           (lo, ms, ms, hi))[0]
        edges.update(ts for ts in (row["last"], row["first"]) if type(ts) is int)
    return edges


def with_edges(reader: StoreReader, samples: Sequence[Sample], start: float, end: float,
               starts: Sequence[float]) -> list[Sample]:
    """`samples` (an even spread of the range's ticks, oldest first) with the range's edge
    ticks (`edge_ticks`) the spread skipped, oldest first."""
    have = {round(sample.ts * 1000) for sample in samples}
    out = list(samples)
    missing = sorted(edge_ticks(reader, start, end, starts) - have)
    for ts in missing:
        out += reader.samples(ts / 1000, ts / 1000, max_samples=1)
    if missing:
        out.sort(key=lambda sample: sample.ts)
    return out


def recording_gaps(reader: StoreReader, start: float, end: float,
                   max_gap_s: float) -> list[tuple[int, int]]:
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
