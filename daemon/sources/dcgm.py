"""Peace with DCGM: who reads a GPU's profiling counters, and DCGM's readings where it does.

NVML's GPM and DCGM's profiling fields (DCP) read the same hardware counters; two readers skew
each other (nvtop PR #483; jobstats moved to GPM to stay off its users' DCGM). So mlcostd
never takes GPM samples on a GPU whose counters DCGM holds:

- `[nvml].dcgm_exporter_url` set (dcgm-exporter's `/metrics`, e.g. http://localhost:9400/metrics):
  SM, tensor and DRAM activity come from its `DCGM_FI_PROF_SM_ACTIVE`,
  `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE` and `DCGM_FI_PROF_DRAM_ACTIVE` (0-1 ratios, one series per
  GPU, labelled `gpu` and `UUID`), polled by one thread; GPM is never used, even while the
  exporter does not answer or lists no profiling field for a GPU (its DCGM may still hold them);
- else, `nv-hostengine` running on the host (DCGM's daemon, found by its process name): GPM is
  left off and SM activity is absent (the README says how to point mlcostd at the exporter);
- else GPM, where the GPU has it; a GPU whose GPM sample is refused as in use (another reader
  holds the counters) is left alone from then on (daemon.sources.nvml).

Every value read is bounded: the exposition is read up to MAX_EXPOSITION_BYTES, only the three
fields are kept, values outside 0-1 are dropped.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

GPM = "gpm"
DCGM_EXPORTER = "dcgm-exporter"
HOSTENGINE = "nv-hostengine"
HOSTENGINE_NAME = "nv-hostengine"  # /proc/PID/comm of DCGM's host engine
FIELDS = {"DCGM_FI_PROF_SM_ACTIVE": "sm", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor",
          "DCGM_FI_PROF_DRAM_ACTIVE": "dram"}
MAX_EXPOSITION_BYTES = 8 << 20  # dcgm-exporter on 8 GPUs with every field: well under 1 MiB
MAX_GPUS = 256
HOSTENGINE_RECHECK_S = 30.0
STALE_AFTER_INTERVALS = 5  # a reading older than this many polls is no reading


@dataclass(frozen=True, slots=True)
class DcgmActivity:
    """One GPU's profiling ratios (0-1) from DCGM; None where the exporter has no such field."""

    sm: float | None = None
    tensor: float | None = None
    dram: float | None = None


def parse_exposition(text: str) -> dict[str, DcgmActivity]:
    """{GPU UUID: activity} from dcgm-exporter's text format. Whole-GPU series only (a MIG
    instance's series carry GPU_I_ID); the first series of a GPU wins (dcgm-exporter repeats
    no GPU). ValueError when the text is not an exposition."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            field = FIELDS.get(sample.name)
            uuid = sample.labels.get("UUID", "")
            if field is None or not uuid or "GPU_I_ID" in sample.labels:
                continue
            value = float(sample.value)
            if not math.isfinite(value) or not 0.0 <= value <= 1.0:
                continue
            ratios = found.get(uuid)
            if ratios is None:
                if len(found) >= MAX_GPUS:
                    continue
                ratios = found[uuid] = {}
            ratios.setdefault(field, value)
    return {uuid: DcgmActivity(**ratios) for uuid, ratios in found.items()}


def hostengine_running(proc_root: str = "/proc") -> bool:
    """True when a process named nv-hostengine runs (its comm, not its command line: a
    process's arguments are its own)."""
    try:
        pids = [name for name in os.listdir(proc_root) if name.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            with open(f"{proc_root}/{pid}/comm", "rb") as comm:
                if comm.read(64).strip() == HOSTENGINE_NAME.encode():
                    return True
        except OSError:
            continue  # gone, or not ours to read
    return False


def fetch_exposition(url: str, timeout_s: float) -> str:
    """GET the exporter's /metrics within `timeout_s` in all and MAX_EXPOSITION_BYTES (a
    trickling or endless answer is cut, as every network read mlcost makes). OSError on
    failure (unreachable, timeout, too large)."""
    from pricing.http import FetchError, read_bounded_sync

    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - config
        try:
            data = read_bounded_sync(response, max_bytes=MAX_EXPOSITION_BYTES,
                                     deadline=deadline, shown=url)
        except FetchError as exc:
            raise TimeoutError(str(exc)) from None
    return data.decode("utf-8", "replace")


class ProfilingCounters:
    """Who reads each GPU's profiling counters, and DCGM's latest readings. `source_for` is what
    a GPU reader asks before each reading; never blocks on the network (a thread polls the
    exporter) and at most every HOSTENGINE_RECHECK_S scans /proc for nv-hostengine."""

    def __init__(self, exporter_url: str = "", interval_s: float = 1.0,
                 timeout_s: float = 1.0, proc_root: str = "/proc") -> None:
        self.exporter_url = exporter_url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.proc_root = proc_root
        self.status = "not asked yet" if exporter_url else "not configured"
        self._readings: dict[str, DcgmActivity] = {}
        self._read_at = float("-inf")  # time.monotonic() of the last good reading
        self._hostengine: tuple[float, bool] | None = None  # (checked at, running), set whole
        self._scan = threading.Lock()  # one /proc scan at a time
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the exporter's poller ---------------------------------------------------------------

    def start(self) -> None:
        if self.exporter_url and self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="dcgm-exporter", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1.0)

    def poll_once(self) -> None:
        """Read the exporter once; the status says how it went. Never raises."""
        try:
            readings = parse_exposition(fetch_exposition(self.exporter_url, self.timeout_s))
        except (OSError, ValueError, urllib.error.URLError) as exc:
            status = f"{self.exporter_url}: {type(exc).__name__}: {str(exc)[:200]}"
            if status.split(":")[:2] != self.status.split(":")[:2]:
                log.warning("dcgm-exporter %s; SM activity absent until it answers (GPM stays "
                            "off: DCGM may hold the counters)", status)
            self.status = status
            return
        with self._lock:
            self._readings = readings
            self._read_at = time.monotonic()
        status = (f"ok: profiling fields for {len(readings)} GPU(s)" if readings else
                  "ok, but no DCGM_FI_PROF_* field: add DCGM_FI_PROF_SM_ACTIVE, "
                  "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and DCGM_FI_PROF_DRAM_ACTIVE to its "
                  "counters CSV")
        if status != self.status:
            log.info("dcgm-exporter %s: %s", self.exporter_url, status)
        self.status = status

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.interval_s)

    # -- what a GPU reader asks ------------------------------------------------------------

    def latest(self) -> Mapping[str, DcgmActivity]:
        """{UUID: activity} of the exporter's latest reading; {} once it is stale."""
        with self._lock:
            if time.monotonic() - self._read_at > STALE_AFTER_INTERVALS * self.interval_s:
                return {}
            return self._readings

    def hostengine(self) -> bool:
        """Whether nv-hostengine runs, rechecked at most every HOSTENGINE_RECHECK_S by one
        thread (a scan of /proc costs ~12 ms CPU at 400 processes): while one GPU's reader
        rescans, the others go on with the last answer; only the very first waits for it."""
        known = self._hostengine
        if known is not None and time.monotonic() - known[0] < HOSTENGINE_RECHECK_S:
            return known[1]
        if known is None:
            self._scan.acquire()
        elif not self._scan.acquire(blocking=False):
            return known[1]  # another reader is rescanning
        try:
            known = self._hostengine
            if known is not None and time.monotonic() - known[0] < HOSTENGINE_RECHECK_S:
                return known[1]
            running = hostengine_running(self.proc_root)
            self._hostengine = (time.monotonic(), running)
            return running
        finally:
            self._scan.release()

    def source_for(self, uuid: str) -> tuple[str, DcgmActivity | None]:
        """(who reads this GPU's profiling counters, DCGM's activity for it or None):
        DCGM_EXPORTER, HOSTENGINE (DCGM holds them, no reading for us) or GPM (ours to use)."""
        if self.exporter_url:
            return DCGM_EXPORTER, self.latest().get(uuid)
        if self.hostengine():
            return HOSTENGINE, None
        return GPM, None
