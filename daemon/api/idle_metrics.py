"""`/metrics` families of the daemon's own idleness verdict, for the alerts to follow it rather
than GPU utilization alone (README "On a fleet"; MlcostHostIdle, MlcostGpuHeldIdle):

- `mlcost_host_active` (Hostname): 1 when GET /v1/idle would answer `active` now, 0 when idle. A
  server waiting for requests, a queue consumer between jobs, a periodic job between runs, a job
  doing I/O or CPU work keeps it 1 however idle its GPUs read; so does what cannot be told (no
  tick yet, a GPU without a reading): the answer that stops nothing.
- `mlcost_gpu_held_idle` (the GPU series' labels): 1 when the GPU is idle and a process holding
  it is idle by the same verdict (/v1/idle's per-process `active` false: a notebook or a stopped
  job, as idle_gpu_held advises); 0 when the GPU is busy, nobody holds it, or every holder is at
  work (a server's idle GPU is idle_server's advice); absent when the GPU has no reading.

One definition: daemon.analysis.idleness.answer, as /v1/idle calls it (daemon.api.idle), on the
tick's /v1/now document with `for` 0: "idle now". The look-back history is not read (no store
read on a scrape); an alert's `for:` is the duration. The document is asked for only where the
verdict needs it: a busy GPU is activity enough for the host (the answer counts it as such), and
a busy or unheld GPU is never held idle; so a host whose GPUs are all busy, or busy and unheld,
builds no document for it. Where one is built (a held GPU idle, or none busy: about 1 ms of CPU
at 8 GPUs x 64 processes, the document and the answer), /v1/now's cache shares it with the API.
Rendered once per tick, a verdict is at most a tick behind /v1/idle's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from daemon.analysis import idleness
from daemon.api.exposition import Family, LabelPairs
from daemon.api.metrics_state import MetricsState


def verdict_now(document: Mapping[str, Any], periodic: Mapping[str, int],
                idle_utilization_pct: float, interval_s: float,
                working: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """/v1/idle's answer for `for` 0 on `document` (the tick's /v1/now), without the store's
    history: with nothing asked of the past, the history only dates the answer's `since`."""
    ts = document.get("ts")
    history = None if not isinstance(ts, int | float) else idleness.History(
        since=ts, until=ts, width_s=max(interval_s, 1.0), first_tick=ts, largest_gap_s=0.0)
    return idleness.answer(document, history, for_s=0.0,
                           idle_utilization_pct=idle_utilization_pct, interval_s=interval_s,
                           periodic=periodic, working=working)


def idleness_families(state: MetricsState, verdict: Callable[[], Mapping[str, Any]],
                      hostname: str, gpu_labels: Mapping[int, LabelPairs]) -> Iterator[Family]:
    """`verdict`: the answer of `verdict_now` for this tick, called only where it is needed;
    `gpu_labels`: GPU index -> its labels (gpu, UUID, modelName, Hostname)."""
    held = {index for proc in state.processes for index in proc.gpus}
    busy = any(gpu.busy for gpu in state.gpus)
    needed = not busy or any(gpu.busy is False and gpu.index in held for gpu in state.gpus)
    answer = verdict() if needed else None
    host = Family("mlcost_host_active", "1 when mlcostd calls this host active now, 0 when idle "
                  "(GET /v1/idle's answer for for=0: a process computing, serving, waiting for "
                  "jobs or doing I/O keeps it 1, as does what cannot be told)", "gauge")
    host.add((("Hostname", hostname),), 1.0 if answer is None or answer.get("active") else 0.0)
    idle_holders: set[Any] = set()
    if answer is not None:
        for proc in answer.get("processes") or []:
            if not proc.get("active"):
                idle_holders.update(proc.get("gpus") or [])
    held_idle = Family("mlcost_gpu_held_idle", "1 when the GPU is idle and a process holding "
                       "it is idle too (GET /v1/idle's per-process verdict: no kernels, not "
                       "serving, not waiting for jobs, no I/O), 0 otherwise; absent when the "
                       "GPU has no reading", "gauge")
    for gpu in state.gpus:
        labels = gpu_labels.get(gpu.index)
        if labels is None or gpu.busy is None:
            continue
        held_idle.add(labels, 1.0 if not gpu.busy and gpu.index in idle_holders else 0.0)
    yield host
    yield held_idle
