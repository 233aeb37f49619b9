"""Incident snapshots: taking one (the store file, its HTML report, the upload) and the triggers
that take them when something happens.

`take_snapshot` is the one way a snapshot is made, by `mlcostd snapshot` (direct on --db),
`POST /v1/snapshots` and the triggers alike. It blocks (SQLite, rendering, S3): the daemon runs
it in a thread, one at a time.

`SnapshotTriggers` watches what the tick and the rules already produce ([snapshots] in the
config): a GPU lost, or timing out on most ticks for `gpu_timeout_after`, a host idle
event, a GPU held idle past `held_idle_after`, a budget crossed, a new recommendation saving at least
`recommendation_savings` per month. Each takes one snapshot of [trigger - before, trigger +
after], once `after` has passed; at most `max_per_hour` of each kind, the folder kept under
`max_total_size` and `max_age`. The event and its snapshot point to each other: the event row's `snapshot`
column (and the live /v1/now event's `snapshot`), the snapshot's `trigger`.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import json
import logging
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from daemon import clock as daemon_clock
from daemon.analysis.idle import BUDGET_EXCEEDED, GPU_HELD_IDLE, HOST_IDLE
from daemon.config import Config, db_path, snapshots_folder
from daemon.sources.safe_text import one_line
from daemon.sources.sample import GPU_OK, GPU_TIMEOUT, Sample
from daemon.store.files import (
    RefusedFile,
    check_folder,
    check_page,
    write_page,
)
from daemon.store.snapshot import (
    HTML_SUFFIX,
    SnapshotError,
    free_path,
    prune,
    record_written,
    snapshot_name,
    write_snapshot,
)

log = logging.getLogger(__name__)

# Trigger kinds: the events' own kinds where an event is the trigger.
MANUAL = "manual"
GPU_LOST = "gpu_lost"  # a GPU whose status is not ok (lost, timeout, error)
HELD_IDLE = GPU_HELD_IDLE
BUDGET = BUDGET_EXCEEDED
RECOMMENDATION = "recommendation"
# A GPU that fails again within this long of its last failure is the same incident (a sick GPU
# flaps between timing out and answering every few seconds).
GPU_REARM_S = 600.0
# Readings that time out are an incident only when they keep timing out: on at least half the
# ticks of the last [snapshots].gpu_timeout_after, and 3 ticks or more. Under load (the Hopper
# scenario beside busy CPUs) one NVML read overran its deadline and raised a false incident;
# a hung GPU (each call blocking seconds) times out on most ticks, answering in between.
GPU_TIMEOUT_SHARE = 0.5
GPU_TIMEOUT_MIN_TICKS = 3


def take_snapshot(config: Config, *, since: float, until: float, out: Path | None = None,
                  html: bool = False, upload: str | None = None,
                  trigger: dict[str, Any] | None = None, db: Path | None = None,
                  hostname: str = "", empty_ok: bool = False) -> dict[str, Any]:
    """Write the snapshot of [since, until] (and its HTML, and upload both when asked); a
    range with no tick is refused (EmptySnapshotRange) unless `empty_ok` (the triggers).
    Returns what was done as a JSON-ready dict: path, bytes, ticks, range, seconds,
    cpu_seconds, html, upload (a list of results), trigger. Raises SnapshotError or
    daemon.runtime.s3_upload.UploadError (a malformed s3:// URL: checked before any work)."""
    from daemon.runtime import s3_upload

    if upload:
        s3_upload.parse_s3_url(upload)
    source = db or db_path(config)
    if out is None:  # `mlcostd snapshot` without a daemon too: the folder the daemon checks
        try:
            check_folder(snapshots_folder(config), "snapshots folder",
                         "set [snapshots] folder to a folder of its own (mlcostd creates a "
                         "missing one 0700)")
        except RefusedFile as exc:
            raise SnapshotError(str(exc)) from None
    reason = "-".join(str(part) for part in ((trigger or {}).get("kind") or MANUAL,
                                               (trigger or {}).get("target")) if part)
    target = out or free_path(snapshots_folder(config), snapshot_name(
        hostname or os.uname().nodename, until, reason))
    trigger = dict(trigger or {"kind": MANUAL, "reason": "taken by hand"})
    trigger.setdefault("at", daemon_clock.now())
    try:
        return _write_all(config, source, target, out, since, until, html, upload, trigger,
                          empty_ok)
    finally:
        give_back_freed_memory()


def _write_all(config: Config, source: Path, target: Path, out: Path | None, since: float,
               until: float, html: bool, upload: str | None,
               trigger: dict[str, Any], empty_ok: bool) -> dict[str, Any]:
    from daemon.runtime import s3_upload

    info = write_snapshot(source, target, since, until, trigger=trigger, empty_ok=empty_ok)
    if out is None:  # in the snapshots folder: the API serves only files in its index
        record_written(target)
    result = info.as_dict()
    result["html"] = None
    result["upload"] = []
    files = [target]
    if html:
        html_path = target.with_suffix(HTML_SUFFIX)
        render_html_apart(target, html_path)
        if out is None:
            record_written(html_path)
        result["html"] = str(html_path)
        files.append(html_path)
    if upload:
        results = s3_upload.upload_files(
            files, upload, sse_kms_key_id=config.snapshots.sse_kms_key_id,
            storage_class=config.snapshots.storage_class)
        result["upload"] = [r.as_dict() for r in results]
    return result


def give_back_freed_memory() -> None:
    """Hand the memory a snapshot freed back to the system. Its reads and its HTML build free
    what they took, but glibc's allocator keeps the freed pages for reuse: the daemon's RSS
    stayed ~20 MB higher after one snapshot while the bytes in use were unchanged. Ask glibc
    to trim its heaps (malloc_trim(0), a few ms); a no-op where the C library is not glibc."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols: no `ldconfig -p` child
        trim = libc.malloc_trim  # glibc only (musl has none)
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


# The HTML report is built in a child Python: it reads the snapshot file it is given, and the
# tens of thousands of small objects it reads and drops (samples of every process) would stay
# in the daemon as fragmented allocator arenas: +20 MB RSS after one snapshot at 8 x 64
# (bench/snapshot_memory.py), which malloc_trim cannot give back while the ticks' objects
# live in the same arenas. The child imports as this process does: the same interpreter and
# this process's import path (its PYTHONPATH, site-packages) less its first entry, the folder
# it was started from or its script's; the folder this `daemon` came from is searched last.
_RENDER = ("import json, sys; sys.path[:] = json.loads(sys.argv[3]); from pathlib import Path; "
           "from daemon.runtime.snapshots import render_html_file; "
           "render_html_file(Path(sys.argv[1]), Path(sys.argv[2]))")
RENDER_TIMEOUT_S = 120.0


def render_html_apart(snapshot: Path, html_path: Path) -> None:
    """`render_html_file` in a child process of the same Python and the same `daemon`
    package, so that what it reads never grows this process. Raises SnapshotError with the
    child's last words when it fails."""
    package_root = str(Path(__file__).resolve().parents[2])
    # Absolute entries only, and not sys.path[0]: the current folder (python -m) or the
    # script's, where a root daemon started in a user's folder would import a `daemon`
    # package planted there after its start.
    path = [entry for entry in sys.path[1:] if os.path.isabs(entry)] + [package_root]
    try:
        done = subprocess.run(
            # -I: isolated (the environment as it is now is not read: no PYTHON* variables,
            # no user site, no current folder); cwd="/" for the same reason
            [sys.executable, "-I", "-c", _RENDER, str(snapshot.absolute()), str(html_path.absolute()),
             json.dumps(path)],
            cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            timeout=RENDER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SnapshotError(f"writing the HTML report {html_path} ran past "
                            f"{RENDER_TIMEOUT_S:g} s; take a shorter range (--since)") from None
    except OSError as exc:
        raise SnapshotError(f"cannot start Python ({sys.executable}) to write the HTML report "
                            f"{html_path}: {exc.strerror}") from None
    if done.returncode != 0:
        words = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SnapshotError(f"cannot write the HTML report {html_path}: "
                            f"{one_line(words[-1][:500]) if words else f'exit {done.returncode}'}")


def render_html_file(snapshot: Path, html_path: Path, title: str | None = None,
                     summary: Sequence[str] = (), since: float | None = None,
                     until: float | None = None) -> None:
    """The HTML report of a snapshot (or any store), written atomically with mode 0600 where
    write_page allows (never over a store, `snapshot` itself included);
    `summary`: lines shown above its charts (a profile's verdict); over [since, until] when
    given (a profile's run, as its profile.json: its store's ticks begin before the command
    does), else the snapshot's own range."""
    from daemon.report_html import render_store

    check_page(html_path, (snapshot,))  # before the page is built: a refusal costs nothing
    write_page(html_path, render_store(snapshot, since, until, title=title, summary=summary),
               (snapshot,))


# An incident snapshot that fails (a full disk) is tried this many times in all, each try
# [snapshots].after (at least SNAPSHOT_RETRY_MIN_S) after the one before, over the same range.
SNAPSHOT_TRIES = 3
SNAPSHOT_RETRY_MIN_S = 5.0


class SnapshotTriggers:
    """Incident triggers of one daemon. `on_tick` and `on_recommendations` run on the event
    loop and only note what happened; snapshots are taken in a thread, one at a time."""

    def __init__(self, config: Config, *, hostname: Callable[[], str],
                 on_taken: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
                 clock: Callable[[], float] = daemon_clock.now,
                 known_recommendations: Iterable[str] = ()) -> None:
        self.config = config
        self.settings = config.snapshots
        self.folder = snapshots_folder(config)
        self.hostname = hostname
        self.on_taken = on_taken
        self.clock = clock
        self._pending: dict[str, tuple[float, dict[str, Any]]] = {}  # key -> (due, trigger)
        # keys already taken (or skipped); a recommendation the store had before this start is
        # not new (a restart does not snapshot every standing recommendation again)
        self._fired: set[str] = {f"{RECOMMENDATION}:{r}" for r in known_recommendations}
        self._gpu_bad_at: dict[int, float] = {}  # GPU index -> when it was last not ok
        # GPU index -> (its first tick, its recent ticks: (ts, timed out)) for _timing_out
        self._gpu_ticks: dict[int, tuple[float, deque[tuple[float, bool]]]] = {}
        # trigger kind -> when its snapshots of the last hour were taken: each kind has its own
        # [snapshots].max_per_hour, so idle GPUs (any user can hold one) never use up the hour
        # a lost GPU's snapshot needs (probe 146)
        self._taken_at: dict[str, deque[float]] = {}
        self._task: asyncio.Task[None] | None = None
        self.by_event: dict[str, str] = {}  # event id -> snapshot path
        self.skipped = 0
        self.last: dict[str, Any] | None = None  # what the latest triggered snapshot did
        # The latest incident snapshot that failed for good (SNAPSHOT_TRIES), in words for
        # /v1/health's problems, until one is taken again (a failure only logged went unseen:
        # probe 142 M4).
        self.problem: str | None = None

    # -- noticing --------------------------------------------------------------------------

    @property
    def pending(self) -> dict[str, dict[str, Any]]:
        """The triggers noted and waiting for their `after` delay, by key (a copy)."""
        return {key: trigger for key, (_, trigger) in self._pending.items()}

    @property
    def taking(self) -> bool:
        """Whether an incident snapshot is being written now (it runs in a thread)."""
        return self._task is not None and not self._task.done()

    def _note(self, key: str, at: float, trigger: dict[str, Any]) -> None:
        if key in self._fired or key in self._pending:
            return
        self._fired.add(key)
        trigger = dict(trigger, at=at)
        self._pending[key] = (at + self.settings.after, trigger)
        log.info("incident snapshot due in %gs: %s", self.settings.after, trigger["reason"])

    def on_tick(self, sample: Sample, changed: Iterable[Any], active: Iterable[Any]) -> None:
        """One tick: its GPUs' statuses, the events it opened, the open idle events."""
        s = self.settings
        if s.on_gpu_lost:
            for gpu in sample.gpus:
                late = self._timing_out(gpu.index, sample.ts, gpu.status == GPU_TIMEOUT)
                if gpu.status == GPU_OK or (gpu.status == GPU_TIMEOUT and not late):
                    continue  # a loaded host answers late now and then: no incident
                last_bad = self._gpu_bad_at.get(gpu.index)
                self._gpu_bad_at[gpu.index] = sample.ts
                if last_bad is None or sample.ts - last_bad > GPU_REARM_S:
                    what = {"lost": "is lost", "timeout": "readings time out"}.get(
                        gpu.status, f"reports {gpu.status}")
                    self._note(f"{GPU_LOST}:{gpu.index}:{sample.ts:.0f}", sample.ts, {
                        "kind": GPU_LOST, "target": f"gpu:{gpu.index}", "status": gpu.status,
                        "reason": f"GPU {gpu.index} {what}"
                                  + (f" ({gpu.error})" if gpu.error else "")})
        for event in changed:
            if event.ended_at is not None:
                continue
            if (event.kind == HOST_IDLE and s.on_host_idle) or (
                    event.kind == BUDGET and s.on_budget):
                self._note(event.id, sample.ts, self._event_trigger(event, event.kind))
        if s.held_idle_after > 0:
            for event in active:
                if event.kind == HELD_IDLE and sample.ts - event.started_at >= s.held_idle_after:
                    self._note(event.id, sample.ts, self._event_trigger(event, HELD_IDLE))
        self._start_due()

    def _timing_out(self, index: int, ts: float, timed_out: bool) -> bool:
        """Note one tick of GPU `index`; whether its readings time out enough to be an
        incident: watched for gpu_timeout_after at least, and timed out on at least
        GPU_TIMEOUT_SHARE of the ticks in that span (and GPU_TIMEOUT_MIN_TICKS of them). A sick
        GPU that hangs stays mostly silent, flapping or not; a loaded host's sampler misses a
        deadline now and then."""
        span = self.settings.gpu_timeout_after
        first, ticks = self._gpu_ticks.setdefault(index, (ts, deque()))
        ticks.append((ts, timed_out))
        while ticks and ticks[0][0] < ts - span:
            ticks.popleft()
        late = sum(1 for _, t in ticks if t)
        return (timed_out and ts - first >= span and late >= GPU_TIMEOUT_MIN_TICKS
                and late >= GPU_TIMEOUT_SHARE * len(ticks))

    def on_recommendations(self, recommendations: Iterable[dict[str, Any]], at: float) -> None:
        """One evaluation's recommendations: a new one saving enough is a trigger."""
        threshold = self.settings.recommendation_savings
        if threshold <= 0:
            return
        for rec in recommendations:
            savings = rec.get("savings_per_month") or 0.0
            if savings >= threshold:
                self._note(f"{RECOMMENDATION}:{rec.get('id')}", at, {
                    "kind": RECOMMENDATION, "target": rec.get("target"),
                    "recommendation": {"id": rec.get("id"), "rule": rec.get("rule"),
                                       "savings_per_month": savings},
                    "reason": f"new recommendation {rec.get('rule')} on {rec.get('target')} "
                              f"saves ${savings:,.0f}/month"})

    @staticmethod
    def _event_trigger(event: Any, kind: str) -> dict[str, Any]:
        words = {HOST_IDLE: "the host is idle", BUDGET: "a budget was crossed",
                 HELD_IDLE: f"{event.target} is held idle"}
        return {"kind": kind, "target": event.target,
                "event": {"id": event.id, "kind": event.kind, "target": event.target,
                          "started_at": event.started_at},
                "reason": f"{words.get(kind, kind)} ({event.id})"}

    # -- taking ----------------------------------------------------------------------------

    def _start_due(self) -> None:
        if self.taking:
            return  # one at a time; the next one starts when this one is done
        now = self.clock()
        due = [(at, key) for key, (at, _) in self._pending.items() if at <= now]
        if not due:
            return
        _, key = min(due)
        _, trigger = self._pending.pop(key)
        taken = self._taken_at.setdefault(trigger["kind"], deque())
        while taken and now - taken[0] > 3600:
            taken.popleft()
        if len(taken) >= self.settings.max_per_hour:
            self.skipped += 1
            log.warning("incident snapshot skipped (%s): already %d of its kind (%s) in the last "
                        "hour ([snapshots].max_per_hour)", trigger["reason"], len(taken),
                        trigger["kind"])
            return
        taken.append(now)
        self._task = asyncio.get_running_loop().create_task(self._take(trigger),
                                                            name="incident-snapshot")

    async def _take(self, trigger: dict[str, Any]) -> None:
        s = self.settings
        since, until = trigger["at"] - s.before, trigger["at"] + s.after
        try:
            result = await asyncio.to_thread(
                take_snapshot, self.config, since=since, until=until, html=s.html,
                upload=s.upload or None, trigger=trigger, hostname=self.hostname(),
                empty_ok=True)  # what triggered it is kept, whatever the store holds
        except (SnapshotError, OSError, ValueError) as exc:
            self._failed(trigger, exc)
            return
        except Exception as exc:  # a snapshot must never take the recorder down
            log.exception("incident snapshot (%s) failed", trigger["reason"])
            self._failed(trigger, exc, again=False)
            return
        self.last = result
        self.problem = None
        log.info("incident snapshot: %s (%s, %d bytes)", result["path"], trigger["reason"],
                 result["bytes"])
        for upload in result["upload"]:
            if upload["ok"]:
                log.info("uploaded %s to %s", upload["file"], upload["url"])
            else:
                log.warning("%s", upload["error"])
        event = trigger.get("event")
        if event:
            self.by_event[event["id"]] = result["path"]
        if self.on_taken is not None:
            self.on_taken(trigger, result)
        await self.prune(result["path"])

    def _failed(self, trigger: dict[str, Any], exc: BaseException, again: bool = True) -> None:
        """An incident snapshot failed (a full disk, most often): tried again later, over the
        same range, up to SNAPSHOT_TRIES in all; then said in health until one is taken. A
        failed try does not count against [snapshots].max_per_hour."""
        taken = self._taken_at.get(trigger["kind"])
        if taken:
            taken.pop()
        tries = int(trigger.get("tries", 1))
        said = " ".join(str(exc).split())[:300]
        if again and tries < SNAPSHOT_TRIES:
            retry_s = max(self.settings.after, SNAPSHOT_RETRY_MIN_S)
            log.error("incident snapshot (%s) failed: %s; tried again in %gs", trigger["reason"],
                      said, retry_s)
            key = f"retry:{trigger['reason']}:{trigger['at']}"
            self._pending[key] = (self.clock() + retry_s, dict(trigger, tries=tries + 1))
            return
        log.error("incident snapshot (%s) failed: %s; not tried again", trigger["reason"], said)
        self.problem = (f"the incident snapshot of {trigger['reason']} failed "
                        f"{tries} time{'s' if tries != 1 else ''} ({said}); take one by hand "
                        "once the cause is gone: mlcostd snapshot --since ...")

    async def prune(self, keep: str) -> None:
        """Keep the snapshots folder within [snapshots] max_total_size and max_age (`keep`,
        the snapshot just taken, stays). Never raises."""
        s = self.settings
        try:
            removed = await asyncio.to_thread(prune, self.folder, s.max_total_size, s.max_age,
                                              None, keep)
        except OSError as exc:
            log.warning("cannot prune the snapshots folder %s: %s", self.folder, exc)
            return
        if removed:
            log.info("removed %d old snapshot files from %s ([snapshots] size and age limits)",
                     len(removed), self.folder)

    async def stop(self) -> None:
        """Wait for a snapshot being written (it is atomic: a cancelled thread would still run)."""
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 30)
            except (asyncio.TimeoutError, TimeoutError):
                log.warning("an incident snapshot was still being written at stop")
