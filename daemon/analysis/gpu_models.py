"""A window's GPU rows across a restart onto other GPUs (a resized instance that kept its store):
a row per GPU and model, each over its part of the window, never an A100's readings averaged
into an H100's under the later name (probe 126 F5). `mlcostd report` and the snapshot page
(daemon.report_html) build their GPU tables with it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from daemon.analysis.ledger import run_starts
from daemon.store import queries
from daemon.store.reader import StoreReader
from daemon.store.schema import GPU_READING

Readings = Mapping[tuple[str, str], list[tuple[float, float, dict[str, Any]]]]


def gpu_changes(readings: Readings, start: float, end: float) -> dict[int, list[float]]:
    """Each GPU index whose model or UUID the store recorded changing inside (start, end] (a
    daemon started again on other GPUs: schema.GPU_READING), with the times it changed: the
    start of the run that recorded the new GPU (its first tick may come before the reading)."""
    starts = run_starts(readings)
    changes: dict[int, list[float]] = {}
    for (kind, name), rows in readings.items():
        if kind != GPU_READING or not name.isdigit():
            continue
        before: tuple[Any, Any] | None = None
        last = -math.inf
        for ts, _, detail in sorted(rows, key=lambda row: row[0]):
            facts = (detail.get("name"), detail.get("uuid"))
            if before is not None and facts != before and start < ts <= end:
                run = max((s for s in starts if last < s <= ts), default=ts)
                changes.setdefault(int(name), []).append(max(run, start))
            before, last = facts, ts
    return changes


def split_by_model(reader: StoreReader, gpus: list[dict[str, Any]], readings: Readings,
                   start: float, end: float, rolled: bool) -> list[dict[str, Any]]:
    """The window's GPU rows, where a GPU changed model inside it one row per GPU and model,
    each over its part of the window (`since`, `until`; both None on a row of the whole
    window): the utilization, memory and power of an A100 and of the H100 after it, never
    their mean under the later name (probe 126 F5)."""
    changes = gpu_changes(readings, start, end)
    for gpu in gpus:
        gpu.update(since=None, until=None)
    if not changes:
        return gpus
    parts: dict[tuple[float, float], list[dict[str, Any]]] = {}
    out = []
    for gpu in gpus:
        index = gpu["index"]
        if index not in changes:
            out.append(gpu)
            continue
        # (from the rollups: the minute the change fell in from its raw ticks, each row its
        # part; where they are gone, whole in the new GPU's row: a minute rollup holds both)
        cuts = sorted(max(start, at) for at in changes[index])
        edges = [start, *cuts, end]
        for a, b in zip(edges, edges[1:], strict=False):
            if b <= a:
                continue
            if (a, b) not in parts:  # (a tick at the change is the new GPU's)
                last = b if b == end else b - 0.001
                parts[(a, b)] = (reader.rollup_summary(a, last, raw_edges=(a != start, b != end))
                                 if rolled else reader.window_summary(a, last))["gpus"]
            # (the facts last recorded before the part's end: its GPU's, also where the
            # window begins before its first reading)
            facts = queries.gpus_then(readings, b if b == end else b - 0.001).get(index, {})
            for row in parts[(a, b)]:
                if row["index"] == index and row.get("samples"):
                    out.append(dict(row, **facts, since=a, until=b))
    return out
