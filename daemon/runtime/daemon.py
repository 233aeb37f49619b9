"""mlcostd's asyncio service: one tick per interval, slow work beside it, a clean exit.

The tick reads what the sources hold (NVML readers and process discovery run beside it in
threads), builds one frozen Sample and writes it in one transaction. Store maintenance (rollups,
retention) runs in the gap after the write, within a small time budget, so it never delays a tick.
Pricing the host and building the analyzer are in runtime/price_host.py, `--simulate` in
runtime/simulation.py, the /v1/now document in api/document.py. Recommendation snoozes live
here (and in the store), nowhere else.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import math
import os
import secrets
import signal
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from typing import Any

from daemon import clock
from daemon.analysis.analyzer import Analyzer
from daemon.analysis.balance import checkpoint_times, phase_balances
from daemon.analysis.book import HOLDING
from daemon.analysis.kinds import Kind, job_wait_markers
from daemon.analysis.latency import LatencyMeter
from daemon.analysis.latency import reading as latency_reading
from daemon.analysis.meters import reading_name
from daemon.analysis.window_ticks import WINDOW_S as EVALUATION_WINDOW_S  # phase balances too
from daemon.api.actions import START_TIME_TOLERANCE_S
from daemon.api.audit import ActionGate
from daemon.api.document import CostView, ProcessEntries, gpu_busy, now_document
from daemon.api.metrics_state import MetricsState, metrics_state
from daemon.api.now_cache import NowCache
from daemon.config import Config, db_path, simulated_db_path, snapshots_folder
from daemon.runtime import memory, resume, s3_upload, systemd
from daemon.runtime.attribution import Attribution
from daemon.runtime.kinds import KindTracker
from daemon.runtime.late_ticks import LateTicks
from daemon.runtime.price_host import build_analyzer, price_host
from daemon.runtime.simulation import Simulation, SimulationError
from daemon.runtime.snapshots import SnapshotTriggers, take_snapshot
from daemon.sources.host import HostReader
from daemon.sources.nvml import NvmlSource
from daemon.sources.owners import OwnerReader
from daemon.sources.podresources import Allocation, PodResources
from daemon.sources.procs import PressureReader, ProcessSource
from daemon.sources.redact import redact_document, redact_field, redact_name
from daemon.sources.safe_text import one_line
from daemon.sources.sample import GpuUse, Sample
from daemon.store import facts, queries
from daemon.store.files import (
    RefusedFile,
    check_existing,
    check_folder,
    private_folder,
    remove_stale_temp_files,
)
from daemon.store.lock import StoreLocked, WriterLock
from daemon.store.schema import SNOOZE_READING
from daemon.store.snapshot import INDEX_NAME
from daemon.store.writer import Store, StoreError
from daemon.wire import parse_process_key, process_key

log = logging.getLogger(__name__)

# GPU processes as NVML lists them (pid -> its uses) -> the processes to record.
ProcessFilter = Callable[[dict[int, tuple[GpuUse, ...]]], dict[int, tuple[GpuUse, ...]]]

DISCOVERY_INTERVAL_S = 2.0  # how soon a new GPU process is picked up
KINDS_RECORD_EVERY_S = 30.0  # kinds whose evidence or audit figures alone moved: recorded so often
CHILDREN_SCAN_EVERY = 5  # rounds between full scans for children (workers of known processes)
FIRST_EVALUATION_S = 2.0  # the first advice comes this soon after start (few rules fire yet)
MAINTENANCE_BUDGET_S = 0.02
# A tick this far behind is a clock step forward where the wall clock moved this much more than
# the monotonic one, else the loop was held (a blocking call in it): said apart in the log.
CLOCK_JUMP_S = 30.0
NVML_START_WAIT_S = 10.0  # at start, how long pricing waits for NVML to count the GPUs
# /v1/now's phase balances: one whose process's windows and samples did not change is rebuilt
# once its time grew by 1% (its shares moved by at most a percentage point): not every tick
PHASES_SHOWN_DRIFT = 0.01


class DaemonError(RuntimeError):
    """The daemon cannot start; the message says why and what to do."""


def _process_of(rec: dict[str, Any]) -> str | None:
    """The process key a recommendation is about (its action's pid and start time), if any."""
    action = rec.get("action") or {}
    pid, start = action.get("pid"), action.get("start_time")
    if isinstance(pid, int) and isinstance(start, int | float):
        return process_key(pid, start)
    target = rec.get("target")
    if isinstance(target, str) and target.count(":") == 1 and not target.startswith("gpu"):
        try:
            return process_key(*parse_process_key(target))
        except ValueError:
            return None
    return None


def _path_advice(exc: OSError) -> str:
    """What to do about an OSError on the store's folder, by its cause."""
    if exc.errno == errno.EROFS:
        return "that file system is mounted read-only: pass --db with a path on a writable one"
    if exc.errno == errno.ENOSPC:
        return "free space on that disk, or pass --db with a path on another"
    if exc.errno in (errno.EACCES, errno.EPERM):
        if os.geteuid() == 0:  # (root refused: /sys, /proc, an immutable file, a root-squash mount)
            return ("even root cannot write there (a kernel file system such as /sys, an "
                    "immutable file, a network mount that squashes root): pass --db with a path "
                    "on a local disk")
        return "mlcostd's user cannot write there: run as root, or pass --db with a writable path"
    return "pass --db with a writable path"


class Daemon:
    def __init__(
        self,
        config: Config,
        *,
        simulate: str | None = None,
        on_tick: Callable[[Sample], None] | None = None,
        max_ticks: int | None = None,
        process_filter: ProcessFilter | None = None,
        serve_api: bool = True,
        sample_stacks_always: bool = False,
        periodic_rules: bool = True,
        stop_on_signals: bool = True,
        out_option: str | None = None,
        db_origin: str | None = None,
    ) -> None:
        self.config = config
        # where the store's path came from, for a refusal to name: "--db", "[daemon].db in
        # FILE", or None (a default): a [daemon].db from the config that was a directory was
        # told "pass --db", a flag the operator had not used (probe 155 L4)
        self.db_origin = db_origin
        # `mlcostd profile` names its store's folder with --out (OUT/profile.db): its refusals
        # must name that option, not --db, which it does not have
        self.out_option = out_option
        self.simulate = simulate
        self.on_tick = on_tick
        self.max_ticks = max_ticks
        # `mlcostd profile`: only one process tree is recorded (the filter gets NVML's GPU
        # processes and returns the ones to record, adding the tree's processes that hold no
        # GPU with no uses), no API is served, and the tree's stacks are sampled from its
        # first tick on (runtime/attribution.py), not only in low-utilization windows; the
        # rules run once, over the whole run, when it asks (`evaluate`): every
        # [cost].evaluate_every only the unit-cost counters and storage are read.
        self.process_filter = process_filter
        self.serve_api = serve_api
        self.sample_stacks_always = sample_stacks_always
        self.periodic_rules = periodic_rules
        # SIGTERM/SIGINT stop it; the profile handles them itself (it stops the command first)
        self.stop_on_signals = stop_on_signals
        self._discovery = asyncio.Lock()  # one discovery round at a time
        self.ready = asyncio.Event()  # set once the first tick may run: sources and rules up
        self.db = db_path(config)
        self.tick = self.first_tick = 0
        self.started_at = clock.now()
        # Who this daemon is, whatever it is reached as (a unix socket, an http URL, a proxy):
        # chosen at its start, said in /v1/now and /v1/health, so that a fleet view reaching it
        # twice counts it once (mlcost_tui.sources.one_per_daemon).
        self.daemon_id = secrets.token_hex(8)
        self.ticks_late = 0
        self.late_ticks = LateTicks(config.daemon.interval)  # /v1/health and the log say them
        self.last_sample: Sample | None = None
        self.previous_sample: Sample | None = None
        self.host: dict[str, Any] = {}
        self.nvml = NvmlSource(config.nvml, config.daemon.interval)
        self.procs = ProcessSource(children=config.processes.children,
                                   owners=OwnerReader(
                                       config.owners.slurm_job_info_dir,
                                       pod_resources=PodResources(
                                           config.owners.pod_resources_socket)))
        # the host's CPU, memory and PSI, read each tick through files kept open (first read on)
        self.host_usage = HostReader()
        self.pressure = PressureReader()
        self.store: Store | None = None
        self.simulation: Simulation | None = None
        self._stop = asyncio.Event()
        self._lock = WriterLock(self.db)
        self.api: Any = None  # daemon.api.server.ApiServer while running
        self.analyzer: Analyzer | None = None
        self.priced_for_gpus: int | None = None  # the GPUs NVML had counted when the host was priced
        self.attribution: Attribution | None = None
        # each GPU process's workload kind, refreshed by discovery; [kinds.jobs] overrides
        self.kinds = KindTracker(job_kinds=config.kinds.jobs, jobs=config.cost.jobs)
        self._kinds_recorded: dict[str, Any] = {}
        self._kinds_headline: dict[str, Any] = {}
        self._kinds_recorded_at = 0.0
        # (pid, start_time) -> its kernels ran at some tick since the last kinds round: the
        # shape of its GPU use reads every tick, not one tick a round (a loaded host stretches
        # a job's loop, and one tick a round then misses most of its kernels).
        self._kernels_since_round: dict[tuple[int, float], bool] = {}
        # The job_wait markers (daemon.analysis.kinds.job_wait_markers) of each process whose
        # phase balance in the last rules round waits for its next job, with that round's end:
        # the kinds round reads them beside the frame markers (a job consumer).
        self._job_waits: dict[tuple[int, float], dict[str, float]] = {}
        # the live phase balances (attribution.phases) as /v1/now shows them: built when
        # asked, once per (tick, fact) version
        self._phases_shown: tuple[object, dict[str, dict[str, Any]]] = (None, {})
        # /v1/now: the latest document and its body (api/now_cache.py), the parts of its process
        # entries kept between documents, and a count of the changes to what it shows made
        # outside a tick (a rules round, the slow meters, snoozes, an incident snapshot)
        self._now = NowCache()
        self._now_entries = ProcessEntries()
        self._shown_changes = 0
        # recommendation id -> snoozed until (epoch s): the one place snoozes are kept; written
        # to the store's recommendations table and read back at start, so they survive a restart
        self.snoozed: dict[str, float] = {}
        self.snapshots: SnapshotTriggers | None = None  # incident triggers ([snapshots])
        self.recommended_before: set[str] = set()  # recommendation ids the store had at start
        self._one_snapshot = asyncio.Lock()  # snapshots by hand: one at a time
        # who applied what, a dry run before each real action, one at a time (api/audit.py)
        self.action_gate = ActionGate(record=self._record_event)

    # -- start and stop ----------------------------------------------------------------

    def _check_start(self) -> None:
        """Refuse what can be refused before anything is created: the database path, the
        scenario, the API's socket (unsafe, or served by another daemon), its listen
        addresses and ports (bound here, served later) and token path. Raises DaemonError."""
        from daemon.api.server import ApiError, SocketInUse

        if self.db.is_dir() and not self.db.is_symlink():
            raise DaemonError(self._db_is_a_directory())
        self._check_files()
        if self.simulate:
            simulation = Simulation(self.simulate)
            try:
                simulation.load()
            except SimulationError as exc:
                raise DaemonError(str(exc)) from None
            self.simulation = simulation
        if not self.serve_api:
            return
        api = self._make_api()
        try:
            api.check()
        except SocketInUse as exc:
            if self.config.api.socket or self.config.api.listen:
                raise DaemonError(str(exc)) from None
            # The default socket belongs to another recorder: record anyway, without an API.
            log.warning("%s; recording without an API", exc)
            return
        except ApiError as exc:
            raise DaemonError(str(exc)) from None
        self.api = api

    def _db_is_a_directory(self) -> str:
        """The refusal of a store path that is a directory, naming where the path came from
        and how to change it there."""
        example = self.db / "mlcost.db"
        origin = self.db_origin
        if origin and origin.startswith("[daemon].db"):
            return (f"the database path {self.db} ({origin}) is a directory; set [daemon].db "
                    f"there to a file path, e.g. db = {json.dumps(str(example))}, or pass --db "
                    "with one")
        said = f" ({origin})" if origin else ""
        return (f"the database path {self.db}{said} is a directory; pass --db with a file "
                f"path, e.g. --db {example}")

    def _check_files(self) -> None:
        """Refuse, before anything is created, a state or snapshots folder another user could
        write into (group- or world-writable without the sticky bit, or not root's or ours),
        and a link or a file that is not ours where the database, its WAL and SHM or its lock
        go. Nothing refused is changed, followed or moved. Raises DaemonError."""
        snapshots = snapshots_folder(self.config)
        if self.out_option is not None:
            db_fix = snapshots_fix = (
                f"give {self.out_option} a folder of its own that only you (and root) can "
                "write, or a missing one (it is created 0700)")
        else:
            example = self.db.parent / "mlcost" / self.db.name
            if self.db_origin and self.db_origin.startswith("[daemon].db"):
                elsewhere = (f"set {self.db_origin} to a path in a folder of its own, "
                             f"e.g. db = {json.dumps(str(example))}, or pass --db "
                             "with one")
            else:
                elsewhere = f"pass --db with a path in a folder of its own, e.g. --db {example}"
            db_fix = f"{elsewhere} (mlcostd creates that folder 0700)"
            snapshots_fix = ("set [snapshots] folder to a folder of its own (mlcostd creates a "
                             "missing one 0700)" if self.config.snapshots.folder else
                             elsewhere)
        try:
            check_folder(self.db.parent, "database folder", db_fix)
            check_folder(snapshots, "snapshots folder", snapshots_fix)
            for suffix in ("", "-wal", "-shm", ".lock"):
                check_existing(f"{self.db}{suffix}")
            # the index of what it wrote there: planted in a shared (sticky) folder, every
            # snapshot failed with 503 and nothing in the log
            check_existing(snapshots / INDEX_NAME)
        except RefusedFile as exc:
            raise DaemonError(str(exc)) from None

    def _remove_stale_temp_files(self) -> None:
        """Temporary files in the snapshots folder whose writer was killed (its pid is gone):
        removed at start, as pruning does later. Never raises."""
        for path in remove_stale_temp_files(snapshots_folder(self.config)):
            log.info("removed %s, left by a snapshot writer that was stopped before it "
                     "finished", path)

    def _open_store(self) -> Store:
        try:
            private_folder(self.db.parent)  # 0700 when it creates it, whatever the umask
        except OSError as exc:
            raise DaemonError(
                f"cannot create the database folder {self.db.parent}: {exc.strerror}; "
                f"{_path_advice(exc)}") from None
        try:
            self._lock.acquire()
        except (StoreLocked, RefusedFile) as exc:
            raise DaemonError(str(exc)) from None
        except OSError as exc:  # a read-only folder, no space left to write the pid into it
            raise DaemonError(
                f"cannot take the writer lock {self._lock.path}: {exc.strerror}; "
                f"{_path_advice(exc)}") from None
        store_config = self.config.store
        try:
            store = Store(
                str(self.db),
                raw_retention_s=store_config.raw_retention,
                minute_retention_s=store_config.minute_retention,
                hour_retention_s=store_config.hour_retention,
                max_bytes=store_config.max_size,
            )
        except StoreError as exc:  # a full disk, another writer on the same file, ...
            self._lock.release()
            raise DaemonError(str(exc)) from None
        except OSError as exc:
            self._lock.release()
            raise DaemonError(f"cannot open the store {self.db}: {exc}; check the path, its "
                              "permissions and the free space on its disk") from None
        refused = self._other_host()
        if refused is not None:
            store.close()
            self._lock.release()
            raise DaemonError(refused)
        return store

    def _other_host(self) -> str | None:
        """Why this run must not record into the store it opened (None: it may): the store
        holds a real host and this run simulates one, or the other way round, or another
        scenario. A store records one host: its report and replay read the host (and its
        `simulated` scenario) from the last run's meta, so a simulated run on a real host's
        store turned its whole history into the simulated host's (probe 141 M2)."""
        try:
            reader = Store.reader(str(self.db), timeout_s=5.0)
            try:
                recorded = queries.recorded_host(reader)
            finally:
                reader.close()
        except Exception:  # unreadable now: the writer has opened it; nothing to compare
            return None
        if not recorded:  # a new store, or one no daemon has started on
            return None
        was = recorded.get("simulated")
        was = str(was) if was else None
        now = self.simulation.scenario_name if self.simulation is not None else None
        if was == now:
            return None
        option = self.out_option or "--db"
        if was is None:
            name = recorded.get("hostname")
            held = (f"the recording of a real host{f' ({name!r})' if name else ''}, not a "
                    "simulated one")
        else:
            held = f"the simulated host of scenario {was!r}"
        if now is None:
            doing = "this host's GPUs"
            fix = (f"pass {option} with another file, or move {self.db} aside where its "
                   "simulated samples are not wanted")
        else:
            doing = f"the simulated scenario {now!r}"
            own = simulated_db_path(self.simulate or now)
            fix = f"pass {option} with another file"
            if own != self.db and self.out_option is None:
                fix += (f" (without --db and [daemon].db the scenario records into a store of "
                        f"its own, {own})")
        return (f"the store {self.db} holds {held}; recording {doing} into it would mix two "
                f"hosts in one cost history: {fix}")

    def _start_simulation(self) -> None:
        assert self.simulation is not None  # loaded by _check_start
        try:
            self.simulation.start()
        except SimulationError as exc:
            self.simulation = None
            raise DaemonError(str(exc)) from None
        self.host.update(redact_document(self.simulation.host))  # (its hostname, instance)

    def _stop_simulation(self) -> None:
        if self.simulation is not None:
            self.simulation.stop()
            self.simulation = None

    def request_stop(self) -> None:
        self._stop.set()

    def _hangup(self) -> None:
        """SIGHUP. Run in a terminal (its stderr one), the terminal went away: stop as for
        SIGTERM, everything flushed. Else (systemd, a log file) someone asked for a reload or
        reopened logs: neither exists, so it says so and records on."""
        if sys.stderr is not None and sys.stderr.isatty():
            log.warning("SIGHUP: its terminal hung up; stopping as for SIGTERM")
            self.request_stop()
            return
        log.warning("SIGHUP: mlcostd does not reload its configuration and logs to stderr "
                    "(no file to reopen); recording goes on. Restart it to apply a changed "
                    "config (systemctl restart mlcostd); SIGTERM stops it")

    # -- the HTTP API (daemon/api/) --------------------------------------------------------

    def _make_api(self) -> Any:
        from daemon.api.server import ApiServer
        from daemon.config import socket_path

        api = self.config.api
        return ApiServer(self, socket_path(self.config), listen=api.listen or None,
                         token_file=api.token_file or None,
                         max_connections=int(api.max_connections),
                         request_timeout_s=api.request_timeout,
                         metrics_listen=api.metrics_listen or None,
                         metrics_label_values=int(api.metrics_label_values))

    async def _start_api(self) -> None:
        from daemon.api.server import ApiError, SocketInUse

        if self.api is None:  # serve_api=False, or the default socket is another daemon's
            return
        try:
            await self.api.start()
        except SocketInUse as exc:  # another daemon took the default socket since the check
            if self.config.api.socket or self.config.api.listen:
                raise DaemonError(str(exc)) from None
            # The default socket belongs to another recorder: record anyway, without an API.
            log.warning("%s; recording without an API", exc)
            await self.api.stop()
            self.api = None
        except ApiError as exc:
            raise DaemonError(str(exc)) from None

    # -- recommendations: find, act, snooze ----------------------------------------------------

    def active_recommendations(self) -> list[dict[str, Any]]:
        """The recommendations of the latest evaluation that are not snoozed. On the loop."""
        if self.analyzer is None:
            return []
        return self._not_snoozed(self.analyzer.recommendations())

    def _not_snoozed(self, recommendations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Not snoozed, and not about a process that has exited since the last evaluation
        (the rules run every [cost].evaluate_every; advice must not outlive its process)."""
        if not recommendations:  # (no set of the live processes' keys to build)
            return []
        wall = clock.now()
        alive = ({process_key(p.pid, p.start_time) for p in self.last_sample.processes}
                 if self.last_sample is not None else None)
        return [r for r in recommendations if self.snoozed.get(r["id"], 0.0) <= wall
                and (alive is None or _process_of(r) in alive or _process_of(r) is None)]

    def snoozed_recommendations(self) -> list[dict[str, Any]]:
        """The recommendations of the latest evaluation that are snoozed now, each with its
        `snoozed_until` (what DELETE .../snooze brings back: mlcost-top's `u`). On the loop."""
        if self.analyzer is None or not self.snoozed:
            return []
        wall = clock.now()
        return [dict(r, snoozed_until=until) for r in self.analyzer.recommendations()
                if (until := self.snoozed.get(r["id"], 0.0)) > wall]

    def recommendation(self, rec_id: str) -> dict[str, Any] | None:
        """One active recommendation by id, or None. Call it on the event loop: it reads the
        analyzer's state, which the loop mutates."""
        for rec in self.active_recommendations():
            if rec.get("id") == rec_id:
                return rec
        return None

    # A process that used this much of a CPU in the last tick is not stopped, however idle its
    # GPU: an idle notebook, the one this action is for, waits on its socket at ~0% (a kernel's
    # heartbeat thread uses well under 1%); a thread at work, or a CPU phase, uses most of one.
    ACTION_CPU_MAX_CORES = 0.10

    def action_held_back(self, rec: dict[str, Any]) -> str | None:
        """Why a listed recommendation's action must not run now (None: it may), checked on the
        loop right before its dry run or its real run. The rules look every
        [cost].evaluate_every and a recommendation stays listed through its hold: its
        condition may have turned false since (status "holding": the evaluation after it did
        not find it), or, for a process's SIGTERM, the process may have gone back to work
        within the last tick (kernels of its own, or a busy GPU it holds). Idle means idle:
        a process that works is never stopped."""
        if rec.get("status") == HOLDING:
            since, going = rec.get("condition_false_since"), rec.get("resolves_at")
            when = (f" since {clock.local_time(since, date=False)}"
                    if isinstance(since, int | float) else "")
            goes = (f"; it goes at {clock.local_time(going, date=False)} unless it comes back"
                    if isinstance(going, int | float) else "")
            return (f"recommendation {rec.get('id')} no longer holds: the last evaluation did "
                    f"not find it (its condition false{when}{goes}); nothing done")
        action = rec.get("action") or {}
        pid, start = action.get("pid"), action.get("start_time")
        sample = self.last_sample
        if action.get("kind") != "sigterm" or sample is None or not isinstance(
                start, int | float):
            return None
        proc = next((p for p in sample.processes if p.pid == pid
                     and abs(p.start_time - start) <= START_TIME_TOLERANCE_S), None)
        if proc is None:
            return None  # (not in the last tick: the action finds whether it exited)
        before = self.previous_sample
        was = None
        if before is not None and sample.ts > before.ts:
            was = next((p for p in before.processes if p.key == proc.key), None)
        if was is not None and before is not None:
            # CPU is work too: a thread hashing while the main thread joins it, a job back at
            # its CPU phase (tokenizing) before the rules see it (probe 132 H3, H4)
            cores = (proc.cpu_seconds - was.cpu_seconds) / (sample.ts - before.ts)
            if cores >= self.ACTION_CPU_MAX_CORES:
                return (f"pid {pid} used {cores:.0%} of a CPU in the last tick: it is working "
                        "(a thread, or a CPU phase), whatever its GPU shows; nothing done")
        gpus = {g.index: g for g in sample.gpus}
        for use in (*proc.gpus, *(was.gpus if was is not None else ())):
            if use.sm_share > 0:
                return (f"pid {pid} runs kernels on GPU {use.gpu_index} now ({use.sm_share:.0f}% "
                        "SM in the last ticks): it is working again; nothing done")
            gpu = gpus.get(use.gpu_index)
            if gpu is not None and gpu_busy(gpu, self.config.idle.utilization):
                return (f"GPU {use.gpu_index}, which pid {pid} holds, is busy now "
                        f"({gpu.utilization:.0f}% in the last tick); nothing done")
        return None

    def _record_event(self, event: dict[str, Any]) -> None:
        if self.store is not None:
            facts.write_event(self.store, event, raised_at=clock.now())

    def run_action(self, rec: dict[str, Any], dry_run: bool = True,
                   accept_preliminary: bool = False) -> dict[str, Any]:
        """What the recommendation's action does (dry run) or did. Blocking (a signal, boto3):
        the API runs it in a thread, with a recommendation found on the loop."""
        from daemon.api import actions

        instance_id = (self.host.get("instance") or {}).get("id")
        return actions.apply(rec, dry_run, allow_actions=self.config.api.allow_actions,
                             instance_id=instance_id,
                             accept_preliminary=accept_preliminary).as_dict()

    def apply_recommendation(self, rec_id: str, dry_run: bool = True) -> dict[str, Any] | None:
        """What the recommendation's action does (dry run) or did; None if it is not active."""
        rec = self.recommendation(rec_id)
        return None if rec is None else self.run_action(rec, dry_run)

    def snooze_recommendation(self, rec_id: str, hours: float) -> float | None:
        """Hide a recommendation for `hours`, here and in the store; returns until when, or
        None if it is not active."""
        rec = self.recommendation(rec_id)
        if rec is None:
            return None
        now = clock.now()
        until = now + hours * 3600
        self.snoozed[rec_id] = until
        if self.store is not None:
            facts.write_recommendations(self.store, [dict(rec, snoozed_until=until)], now)
            # when it was snoozed: a replay hides it from then on, as this view does
            facts.write_meter_readings(self.store, now, [(SNOOZE_READING, rec_id, until, {})])
        return until

    def unsnooze_recommendation(self, rec_id: str) -> bool:
        """Show a snoozed recommendation again (an undo of snooze), here and in the store; False
        if it is not snoozed."""
        if self.snoozed.pop(rec_id, None) is None:
            return False
        if self.store is not None:  # when it was undone: a replay lists it again from then on
            facts.write_meter_readings(self.store, clock.now(), [(SNOOZE_READING, rec_id, 0.0, {})])
        if self.store is not None and self.analyzer is not None:
            for rec in self.analyzer.recommendations():
                if rec.get("id") == rec_id:
                    facts.write_recommendations(self.store, [dict(rec, snoozed_until=None)],
                                                clock.now())
        return True

    def _load_snoozes(self) -> None:
        """Snoozes still running, as the store has them (a restart keeps them)."""
        try:
            reader = Store.reader(str(self.db), timeout_s=5.0)
            try:
                wall = clock.now()
                known = queries.recommendations(reader, 0.0)
                self.snoozed = {r["id"]: r["snoozed_until"] for r in known
                                if (r.get("snoozed_until") or 0.0) > wall}
                self.recommended_before = {r["id"] for r in known}  # not news after a restart
            finally:
                reader.close()
        except Exception as exc:  # a store that cannot be read now must not stop recording
            log.warning("cannot read the snoozed recommendations from %s (%s); recommendations "
                        "snoozed before this start show again", self.db, exc)

    async def run(self) -> int:
        """Record until SIGTERM/SIGINT (or max_ticks). Returns the process exit code."""
        with memory.collector_tuned():  # the garbage collector's share: see runtime/memory.py
            return await self._run()

    async def _run(self) -> int:
        self._check_start()
        memory.limit_arenas()  # before the reader threads start: see runtime/memory.py
        loop = asyncio.get_running_loop()
        # Kept until the loop closes (it removes them): a second SIGINT while stopping (Ctrl-C
        # twice, `timeout -s INT`, which signals the child and then its group) only asks again.
        if self.stop_on_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop)
            # A SIGHUP (logrotate's postrotate, an operator expecting a reload, a terminal
            # closed) killed it as SIGKILL would, the last round's spend unwritten (_hangup).
            loop.add_signal_handler(signal.SIGHUP, self._hangup)
        try:
            self.store = self._open_store()
        except BaseException:
            if self.api is not None:
                self.api.release()  # the ports check() bound
            raise
        resume.end_left_open(self.store, self.config)
        self._remove_stale_temp_files()
        self.tick = self.first_tick = self.store.last_tick  # numbering goes on across restarts
        self.started_at = clock.now()
        resume.record_start(self.store, self.started_at)
        try:
            self._load_snoozes()
            if self.simulation is not None:
                self._start_simulation()
            # In a pod the kernel's hostname is the pod's: the DaemonSet passes the node's name.
            # Whoever set it may be hostile: control bytes shown as \x1b (safe_text), a
            # secret in it hidden (it is in /v1/now, /metrics labels, the store, reports).
            self.host.setdefault("hostname", redact_field(one_line(
                os.environ.get("MLCOST_HOSTNAME") or socket.gethostname())))
            self.host["interval_s"] = self.config.daemon.interval
            self.host["idle_utilization_pct"] = self.config.idle.utilization  # replay's verdicts
            # replay's phase_now: [attribution].low_sm_share, at or over which a process works
            self.host["low_sm_share"] = self.config.attribution.low_sm_share
            # replay holds a recommendation through its lapses as the live view did
            self.host["recommendation_hold_s"] = self.config.cost.recommendation_hold
            self.host["evaluate_every_s"] = self.config.cost.evaluate_every  # "none yet" says it
            self.store.set_meta("host", self.host)
            self.nvml.start()
            self.analyzer = await asyncio.to_thread(self._make_analyzer)
            # the first tick lists every GPU: read, or listed as not answering
            await asyncio.to_thread(self.nvml.wait_first_readings)
            self.attribution = Attribution(self.config.attribution, self.store,
                                           idle_utilization_pct=self.config.idle.utilization,
                                           sample_always=self.sample_stacks_always,
                                           interval_s=self.config.daemon.interval,
                                           dump_spread_s=self.config.daemon.interval,
                                           started_at=self.started_at,
                                           connections_opened=self._connections_opened,
                                           kind_of=self._kind_of)
            self.snapshots = SnapshotTriggers(
                self.config, hostname=lambda: str(self.host.get("hostname", "")),
                on_taken=self._snapshot_taken, known_recommendations=self.recommended_before)
            await self._start_api()
            memory.freeze_start_up()  # kept out of the collections while the ticks run
            log.info("recording into %s every %g s", self.db, self.config.daemon.interval)
            systemd.notify("READY=1")
            self.ready.set()
            await self._loop()
        finally:
            systemd.notify("STOPPING=1")
            if self.api is not None:
                await self.api.stop()
            if self.attribution is not None:
                await self.attribution.stop()
            if self.snapshots is not None:
                await self.snapshots.stop()
            self.nvml.stop()
            self.procs.close()
            self.pressure.close()
            self.host_usage.close()
            self._stop_simulation()
            self._record_costs(clock.now())  # the last round's spend, before the store closes
            self.store.close()  # recreates a database deleted under it first, from its copy
            self._lock.release()
            count = self.tick - self.first_tick
            ticks = f"{count} tick{'s' if count != 1 else ''}"
            lost = self.store.health.samples_buffered
            if self.db.exists() and lost:
                log.error("stopped after %s; %d of them could not be written (%s) and are "
                          "lost; the rest is in %s", ticks, lost,
                          self.store.health.problem or self.store.health.last_error, self.db)
            elif self.db.exists() and self.store.health.corrupt_moved_aside:
                log.warning("stopped after %s; the store was found damaged while it "
                            "recorded and moved aside to %s (what it held: `sqlite3 %s "
                            ".recover`); what came after is in %s", ticks,
                            self.store.health.corrupt_moved_aside,
                            self.store.health.corrupt_moved_aside, self.db)
            elif self.db.exists():
                log.info("stopped after %s; everything recorded is in %s", ticks, self.db)
            else:
                log.error("stopped after %s; the database %s no longer exists and could "
                          "not be recreated (%s): what was recorded is lost", ticks, self.db,
                          self.store.health.problem or self.store.health.last_error)
        return 0

    # -- the loop ----------------------------------------------------------------------

    async def _loop(self) -> None:
        interval = self.config.daemon.interval
        discovery = asyncio.create_task(self._discover_forever(), name="process-discovery")
        evaluation = asyncio.create_task(self._evaluate_forever(), name="recommendations")
        watchdog = systemd.watchdog_interval()
        last_watchdog = 0.0
        next_tick = math.ceil(clock.now() / interval) * interval
        last_wall, last_mono = clock.now(), time.monotonic()  # each round's start, both clocks
        try:
            while not self._stop.is_set():
                delay = next_tick - clock.now()
                if delay > interval + CLOCK_JUMP_S:  # the wall clock was set back
                    log.warning("the clock went back by %.0f s; ticks go on from the new time "
                                "(their timestamps stay in order in the store)",
                                delay - interval)
                    next_tick = math.ceil(clock.now() / interval) * interval
                    delay = next_tick - clock.now()
                if delay > 0:
                    try:
                        await asyncio.wait_for(self._stop.wait(), delay)
                        break
                    except asyncio.TimeoutError:
                        pass
                self._tick()
                if watchdog and time.monotonic() - last_watchdog > watchdog:
                    systemd.notify("WATCHDOG=1")
                    last_watchdog = time.monotonic()
                if self.max_ticks is not None and self.tick - self.first_tick >= self.max_ticks:
                    break
                next_tick += interval
                wall, mono = clock.now(), time.monotonic()
                stepped = (wall - last_wall) - (mono - last_mono)  # the wall clock's own move
                last_wall, last_mono = wall, mono
                if next_tick < wall:  # fell behind: skip to the next boundary, say so
                    behind = wall - next_tick
                    missed = math.ceil(behind / interval)
                    next_tick += missed * interval
                    if behind > CLOCK_JUMP_S and stepped > CLOCK_JUMP_S:
                        log.warning("the clock jumped forward by %.0f s; ticks go on from "
                                    "the new time (what was recorded before it is kept as "
                                    "long as it would have been)", stepped)
                        if self.store is not None:
                            self.store.clock_stepped_forward(stepped)
                    else:
                        self.ticks_late += missed
                        self.late_ticks.late(missed, behind)
                        if behind > CLOCK_JUMP_S:  # the loop itself was held that long
                            log.warning("the daemon's loop was held %.0f s (a call in it "
                                        "blocked); %d ticks were not recorded", behind, missed)
                        else:
                            log.debug("tick %d ran late; skipped %d", self.tick, missed)
                self._maintain_until(next_tick)
        finally:
            for task in (discovery, evaluation):
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    # -- the live state, for the API and the TUI ---------------------------------------------

    def now(self) -> dict[str, Any]:
        """The latest state as a JSON-ready document (the API's /v1/now; see the README).
        Built at most once per change of what it shows (`_now_key`): the same document until
        then, to be read, never changed. Call it on the event loop: the tick and the analyzer
        change what it reads."""
        host = dict(self.host, nvml_status=self.nvml.status,
                    driver_version=self.nvml.driver_version)
        # (the store's health is a copy with its size measured now: taken once a call)
        store = self.store.health.as_dict() if self.store is not None else None
        key = self._now_key(host, store)
        wall = clock.now()
        document = self._now.get(key, wall)
        if document is not None:
            return document
        # a snooze that runs out shows its recommendation again: the document holds until then
        expires = min((until for until in self.snoozed.values() if until > wall),
                      default=math.inf)
        return self._now.put(key, self._build_now(host, store), valid_until=expires)

    @property
    def now_builds(self) -> int:
        """How many /v1/now documents were built (not served from the last one) so far."""
        return self._now.builds

    def now_body(self) -> bytes:
        """/v1/now's response body: `now()` as JSON, encoded once per document."""
        self.now()
        return self._now.body()

    def _now_key(self, host: dict[str, Any], store: dict[str, Any] | None) -> tuple[Any, ...]:
        """What /v1/now is built from, compared element by element (the same object, or an
        equal value) with the last document's: the tick first (it changes most often), then
        what changes between ticks: the rules' round and the slow meters (`_shown_changes`),
        snoozes, a stack sampler's status, a phase fact, a kinds round, an incident snapshot
        taken, the store's health."""
        analyzer, attribution, snapshots = self.analyzer, self.attribution, self.snapshots
        book = analyzer.book if analyzer is not None else None
        return (
            self.tick, self.last_sample, self.previous_sample, self._shown_changes,
            tuple(self.snoozed.items()),
            analyzer, analyzer.latest if analyzer is not None else None,
            analyzer.price if analyzer is not None else None,
            book.last_evaluated if book is not None else None,
            len(book.resolved) if book is not None else None,
            attribution,
            tuple(attribution.status_by_key.items()) if attribution is not None else (),
            attribution.phases.version if attribution is not None else None,
            self.kinds.documents(),
            snapshots, len(snapshots.by_event) if snapshots is not None else 0,
            self.store, store, host, self.config.idle.utilization)

    def _build_now(self, host: dict[str, Any], store: dict[str, Any] | None) -> dict[str, Any]:
        cost = None
        if self.analyzer is not None:
            state = self.analyzer.cost_state()
            cost = CostView.from_state(state, self._not_snoozed(state.recommendations))
        statuses = self.attribution.status_by_key if self.attribution is not None else {}
        windows = self.attribution.active_windows() if self.attribution is not None else []
        window_phases = (self.attribution.window_phases() if self.attribution is not None
                         else {})
        document = now_document(
            host=host, sample=self.last_sample, previous=self.previous_sample, tick=self.tick,
            idle_utilization_pct=self.config.idle.utilization, cost=cost,
            phases=self.phases_now(), stack_statuses=statuses, windows=windows,
            kinds=self.kinds.documents(), store=store, entries=self._now_entries,
            working_sm_share=self.config.attribution.low_sm_share, window_phases=window_phases,
            daemon_id=self.daemon_id)
        taken = self.snapshots.by_event if self.snapshots is not None else {}
        for event in document.get("events") or []:
            event["snapshot"] = taken.get(event.get("id"))
        return document

    def metrics_state(self) -> MetricsState:
        """What /metrics shows of the latest tick, from the typed state (daemon.api.
        metrics_state), without building the /v1/now document. On the event loop."""
        return metrics_state(
            host=self.host, nvml_status=self.nvml.status, sample=self.last_sample,
            idle_utilization_pct=self.config.idle.utilization, analyzer=self.analyzer,
            phases=self.phases_now(), kinds=self.kinds.documents(),
            recommendations=self.active_recommendations(), started_at=self.started_at)

    # -- snapshots (daemon/runtime/snapshots.py) -----------------------------------------------

    async def take_snapshot(self, *, since: float, until: float, html: bool,
                            upload: bool) -> dict[str, Any]:
        """A snapshot by hand (the API's POST /v1/snapshots), written in a thread; with
        `upload`, uploaded to the config's [snapshots].upload (the only target there is)."""
        async with self._one_snapshot:
            result = await asyncio.to_thread(
                take_snapshot, self.config, since=since, until=until, html=html,
                upload=self.config.snapshots.upload if upload else None,
                trigger={"kind": "manual", "reason": "taken by hand"}, db=self.db,
                hostname=str(self.host.get("hostname", "")))
            if self.snapshots is not None:  # the folder stays bounded, whoever fills it
                await self.snapshots.prune(result["path"])
            # The client's shell and its AWS_* variables played no part: say whose did.
            result["upload"] = s3_upload.by_the_daemon(result.get("upload") or [])
            return result

    def _connections_opened(self, key: tuple[int, float]) -> int | None:
        """The TCP connections process `key` opened, as its kind read them (Kind.peer_connections,
        from the kinds round's socket reads: the number the idle rule reads too); None where it
        has no kind yet."""
        kind = self.kinds.kinds.get(process_key(*key))
        return None if kind is None else kind.peer_connections

    def _kind_of(self, key: tuple[int, float]) -> Kind | None:
        """Process `key`'s kind as the last kinds round left it (None: no kind yet)."""
        return self.kinds.kinds.get(process_key(*key))

    def _snapshot_taken(self, trigger: dict[str, Any], result: dict[str, Any]) -> None:
        """An incident snapshot is written: its event points to it. On the loop."""
        self._shown_changes += 1  # /v1/now's event names it
        event = trigger.get("event")
        if event and self.store is not None:
            facts.write_event_snapshot(self.store, event["kind"], event["target"],
                                       event["started_at"], result["path"])

    def _make_analyzer(self) -> Analyzer:
        """Price the host (config, simulated scenario, or detection) and build the analyzer.
        Blocking (detection may probe the network): run in a thread at start."""
        simulated = self.host.get("instance") if self.simulate else None
        # A price per GPU-hour needs the GPU count: NVML's start counts them before any GPU
        # is read (the first readings come a tick later; they priced an 8-GPU host as 1).
        self.nvml.wait_ready(NVML_START_WAIT_S)
        self.priced_for_gpus = self.nvml.gpu_count
        price, catalog, instance = price_host(self.config, simulated, self.priced_for_gpus or None)
        self.host["price"] = price.as_dict()
        # (its type, region and id as a metadata service or the config said: shown everywhere)
        self.host.setdefault("instance", redact_document(instance))
        if instance.get("id"):  # [instance].id on a simulated host too (the demo's EC2)
            self.host["instance"]["id"] = redact_document(instance["id"])
        assert self.store is not None
        analyzer = build_analyzer(self.config, price, catalog)
        resume.spend_before(analyzer, self.store, self.config, self._lock.found_left)
        resume.seen_before(analyzer, self.store, self.config, self.started_at)
        resume.record_price(self.store, price, clock.now())
        self.host["grid"] = analyzer.grid().as_dict()  # carbon's intensity, for reports, replays
        self.store.set_meta("host", self.host)
        # The report labels jobs as this daemon did ([cost].jobs), wherever it is read.
        self.store.set_meta("cost", {"jobs": dict(self.config.cost.jobs)})
        return analyzer

    def _record_costs(self, ts: float) -> None:
        """Hand the store what the ledger charged since the last round (hour spend) and what
        the meters read (storage sizes, unit-cost counters, latency histograms), so a report of a past range says
        what /v1/now said. The meters are written each round ([cost].evaluate_every, 30 s by
        default; retention keeps them as long as the hour rollups)."""
        if self.analyzer is None or self.store is None:
            return
        ledger = self.analyzer.ledger
        with ledger.lock:
            taken, charged_to = ledger.take_unrecorded(), ledger.last_ts
        # How far the recorded spend reaches: its last tick charged (ticks may have run since
        # `ts`, in the round's awaits), in the rows' transaction; a report of a store younger
        # than its range counts its days up to here, and the next start charges the ticks
        # after it where this run is killed before its next round (resume.spend_before).
        with self.store.facts_batched():
            facts.write_spend(self.store, *taken)
            self.store.set_meta(queries.SPEND_THROUGH,  # (a tick's time as the store has it)
                                round(charged_to, 3) if charged_to is not None else ts)
        with ledger.lock:
            # (a name keys its readings: redacted, two that differ only in a secret stay two)
            readings: list[tuple[str, str, float, dict[str, Any]]] = [
                ("storage", redact_name(item.path), float(item.bytes),
                 {"price_per_gb_month": item.price_per_gb_month, "files": item.files,
                  "complete": item.complete, "error": item.error})
                for item in ledger.storage_items]
            readings += [("unit", reading_name(m.target, m.url, m.metric), m.last_count,
                          {"target": m.target, "unit": m.unit, "per": m.per, "url": m.shown_url,
                           "metric": m.metric, "labels": dict(m.labels)})
                         for m in ledger.meters if m.base_count is not None and m.error is None]
            readings += [row for row in map(latency_reading, ledger.latency) if row is not None]
        facts.write_meter_readings(self.store, ts, readings)

    async def record_latency(self) -> list[LatencyMeter]:
        """Read the [[cost.latency]] histograms now and record what they read (`mlcostd
        profile` does so every second while its command runs: a server that exits with the
        command takes the requests after its last reading with it). Returns the meters."""
        if self.analyzer is None or self.store is None or not self.analyzer.ledger.latency:
            return []
        meters = await asyncio.to_thread(self.analyzer.ledger.poll_latency)
        self._shown_changes += 1
        self.record_meter_readings(clock.now(), [
            row for row in map(latency_reading, meters) if row is not None])
        return meters

    def record_meter_readings(self, ts: float,
                              readings: list[tuple[str, str, float, dict[str, Any]]]) -> None:
        """Write meter readings taken at `ts` (daemon.store.facts.write_meter_readings)."""
        if self.store is not None and readings:
            facts.write_meter_readings(self.store, ts, readings)

    async def _price_once_counted(self) -> None:
        """A host priced before NVML counted its GPUs (the driver came up after the daemon, or
        NVML took over NVML_START_WAIT_S to start) is priced again once NVML has counted them:
        a price per GPU-hour was for 1 GPU, a whole-host price split over none. On the loop."""
        counted = self.nvml.gpu_count
        if self.priced_for_gpus is not None or not counted or self.analyzer is None:
            return
        self.priced_for_gpus = counted
        simulated = self.host.get("instance") if self.simulate else None
        price, _, _ = await asyncio.to_thread(price_host, self.config, simulated, counted)
        self.analyzer.set_price(price)
        self.host["price"] = price.as_dict()
        if self.store is not None:
            resume.record_price(self.store, price, clock.now())
            self.store.set_meta("host", self.host)
        log.info("price: priced again for the %d GPU(s) NVML counted after the start", counted)

    async def _evaluate_forever(self) -> None:
        """Every [cost].evaluate_every: the price once NVML has counted the GPUs (where it had
        not at start), phase balances from the store, then the rules."""

        every = self.config.cost.evaluate_every
        await asyncio.sleep(min(every, FIRST_EVALUATION_S))
        while True:
            try:
                await self._price_once_counted()
                until = clock.now()
                if self.periodic_rules:
                    await self.evaluate(
                        until - min(EVALUATION_WINDOW_S, max(60.0, until - self.started_at)), until)
                elif self.analyzer is not None:
                    await asyncio.to_thread(self.analyzer.poll_slow)
                    self._shown_changes += 1
                    self._record_costs(until)
            except Exception as error:  # the rules must never take the recorder down
                if self.store is not None and isinstance(error, sqlite3.Error):
                    # the store's file (damaged, a full disk): its health says so; one line
                    damaged = self.store.note_if_damaged(error)
                    log.error("evaluating recommendations failed: the store cannot be read "
                              "(%s)%s; trying again later", error,
                              "; a new one is started at its path"
                              if damaged and self.store.starting_over else "")
                else:
                    log.exception("evaluating recommendations failed; trying again later")
            await asyncio.to_thread(memory.trim)  # what the round's reads freed goes back
            await asyncio.sleep(every)

    async def evaluate(self, since: float, until: float) -> list[dict[str, Any]]:
        """One round of the rules: phase balances over [since, until] (kept in memory; from
        the store when the range starts before what memory holds), the slow meters, the rules,
        and what they found written to the store. Returns the recommendations recorded. On
        the loop (the blocking parts run in threads)."""
        live = self.attribution.phases if self.attribution is not None else None
        if live is not None and live.covers(since):
            balances = live.balances(since, until)
            checkpoints = {process_key(*key): times for key, times in
                           live.checkpoint_times(since, until).items()}
        else:
            balances, checkpoints = await asyncio.to_thread(self._read_attribution, since,
                                                            until)
        self._job_waits = {key: dict.fromkeys(markers, until) for key, balance in balances.items()
                           if (markers := job_wait_markers(balance))}
        if self.analyzer is None:
            return []
        await asyncio.to_thread(self.analyzer.poll_slow)
        self._shown_changes += 1  # the slow meters' figures are in /v1/now's cost
        self._record_costs(until)
        # The rules take a while at many processes: in a thread, on a copy.
        found = await asyncio.to_thread(
            self.analyzer.analyze, self.analyzer.inputs(), balances, checkpoints,
            dict(self.kinds.kinds))
        recorded = self.analyzer.record(found)  # with how long each has stood
        self._shown_changes += 1
        assert self.store is not None
        for event in self.analyzer.idle.active():  # their cost so far grows
            facts.write_event(self.store, event.as_dict())
        for notice in self.analyzer.take_resolved():  # advice that went, and why
            facts.write_event(self.store, notice, raised_at=notice.get("ended_at"))
        # A snoozed recommendation keeps its snooze in the store as it is seen again.
        facts.write_recommendations(
            self.store, [dict(r, snoozed_until=self.snoozed.get(r["id"]))
                         for r in recorded], until)
        if self.snapshots is not None:
            self.snapshots.on_recommendations(self._not_snoozed(recorded), until)
        return recorded

    def _read_attribution(self, since: float,
                          until: float) -> tuple[dict[Any, Any], dict[str, list[float]]]:
        """Phase balances and observed checkpoint times over [since, until], from the store."""
        reader = Store.reader(str(self.db), timeout_s=5.0)
        try:
            return (phase_balances(reader, since, until, self.config.daemon.interval),
                    checkpoint_times(reader, since, until))
        finally:
            reader.close()

    def phases_now(self) -> dict[str, dict[str, Any]]:
        """Each process's phase balance over the rules' window (30 min, or since start), as
        of the last tick: what /v1/now shows. On the loop (the tick feeds what it reads)."""
        live = self.attribution.phases if self.attribution is not None else None
        if live is None:
            return {}
        version = (self.tick, live.version)
        if self._phases_shown[0] != version:
            until = self.last_sample.ts if self.last_sample is not None else clock.now()
            since = until - EVALUATION_WINDOW_S
            self._phases_shown = (version, {process_key(*key): balance for key, balance in
                                            live.balances(since, until,
                                                          drift=PHASES_SHOWN_DRIFT).items()})
        return self._phases_shown[1]

    def phases_in_memory(self, key: str, since_s: float) -> dict[str, Any] | None:
        """The phase balance of one process ("pid:start_time") over the last since_s seconds,
        as of the last tick, when memory holds that range; and over the 30 min /v1/now shows,
        since this daemon started if that is sooner (the window covered is in `since_s`), as
        the rules see it. None where memory
        cannot answer (the range, or a process it has not seen): ask `phases_for` (the store).
        On the loop, where the tick feeds what it reads."""
        live = self.attribution.phases if self.attribution is not None else None
        if live is None or live.since is None or self.last_sample is None:
            return None
        until = self.last_sample.ts
        whole = since_s >= EVALUATION_WINDOW_S
        if since_s > live.window_s or not (whole or live.covers(until - since_s)):
            return None  # longer than memory keeps, or from before this daemon started
        if whole:
            balance = self.phases_now().get(key)
        else:
            balance = next((b for (pid, start), b in live.balances(until - since_s,
                                                                     until).items()
                            if process_key(pid, start) == key), None)
        if balance is None:  # not seen since this daemon started: the store may know it
            return None
        return {"phases": balance, "until": until,
                "since_s": until - max(until - since_s, live.since) if whole else since_s,
                "source": "kept in memory as stack samples arrive"}

    def phases_for(self, key: str, since_s: float) -> dict[str, Any] | None:
        """Phase balance of one process ("pid:start_time") over the last since_s seconds, read
        from the store (blocking: the API runs it in a thread, after `phases_in_memory`)."""
        until = clock.now()
        balances, _ = self._read_attribution(until - since_s, until)
        for (pid, start), balance in balances.items():
            if process_key(pid, start) == key:
                return balance
        return None

    async def _refresh_kinds(self) -> None:
        """Each GPU process's kind (runtime/kinds.py): its sockets and maps read in a thread,
        each at most every few seconds; the kinds recorded in the store's meta for the report
        when they change."""
        sample = self.last_sample
        if sample is None:
            return
        procs = [(p.pid, p.start_time, p.command, p.owner) for p in sample.processes if p.gpus]
        shares = {(p.pid, p.start_time): sum(u.sm_share for u in p.gpus)
                  for p in sample.processes if p.gpus}
        markers = ({key: dict(seen) for key, seen in self.attribution.frame_markers.items()}
                   if self.attribution is not None else {})
        for key, waits in self._job_waits.items():
            markers[key] = {**markers.get(key, {}), **waits}
        ran, self._kernels_since_round = self._kernels_since_round, {}
        now = clock.now()
        parents = {(p.pid, p.start_time): p.ppid for p in sample.processes if p.gpus}
        await asyncio.to_thread(self.kinds.refresh, procs, markers, now, shares,
                                {key: ran.get(key, False) or shares[key] > 0 for key in shares},
                                parents)
        documents = self.kinds.documents()
        if self.store is None or documents == self._kinds_recorded:
            return  # (most rounds: the same documents, compared by identity first)
        # Recorded when a kind changes at once; when only evidence or the audit's figures move
        # (they do every round), at most every KINDS_RECORD_EVERY_S.
        headline = {key: (d["kind"], d["serves"], d["kind_source"]) for key, d in
                    documents.items()}
        due = now - self._kinds_recorded_at >= KINDS_RECORD_EVERY_S
        if due or headline != self._kinds_headline:
            self.store.set_meta("kinds", documents)
            # ... and their history, so a replay or a snapshot shows each as it was then
            facts.write_process_kinds(self.store, {parse_process_key(key): doc
                                                   for key, doc in documents.items()}, now)
            self._kinds_recorded, self._kinds_headline = documents, headline
            self._kinds_recorded_at = now

    def _recorded(self, uses: dict[int, tuple[GpuUse, ...]]) -> dict[int, tuple[GpuUse, ...]]:
        """The processes to record: every GPU process, or what the process filter keeps."""
        return uses if self.process_filter is None else self.process_filter(uses)

    def collect(self) -> Sample:
        """Build this tick's Sample from what the sources hold. Never blocks on a source."""
        nvml_status, gpus, uses, _, kept = self.nvml.latest_and_sick()
        # Processes of a GPU that is lost or not answering still run, and still hold it: each
        # is recorded with what it held there at the GPU's last reading (the burn charges that
        # GPU to them, "unread"); those on no GPU that answers are the sick holders (discovery
        # keeps them watched while they are the processes NVML saw).
        if kept:
            uses = dict(uses)
            for pid, then in kept.items():
                uses[pid] = (*uses[pid], *then) if pid in uses else then
        processes = self.procs.read(self._recorded(uses))
        return Sample(
            ts=clock.now(), tick=self.tick + 1, gpus=gpus, processes=processes,
            host=self.pressure.read(), nvml_status=nvml_status,
            host_usage=self.host_usage.read())

    def tick_now(self) -> None:
        """Take and record one tick now, as the loop does once an interval: collect, store,
        analyse, snapshot triggers. For drivers that step a daemon tick by tick (the tests)."""
        self._tick()

    def _tick(self) -> None:
        sample = self.collect()
        self.tick = sample.tick
        assert self.store is not None
        self.store.write(sample)
        self.previous_sample, self.last_sample = self.last_sample, sample
        ran = self._kernels_since_round
        for proc in sample.processes:  # whether its kernels ran at any tick since the last round
            uses = proc.gpus
            if uses:
                key = proc.key
                if key not in ran:  # once they ran, no need to look again this round
                    for use in uses:  # (a loop, not any() over a generator: per process)
                        if use.sm_share > 0:
                            ran[key] = True
                            break
        with self.store.facts_batched():  # the tick's events and stack samples: one commit
            changed = self.analyzer.update(sample) if self.analyzer is not None else []
            for event in changed:  # (raised now, if this tick opened it)
                facts.write_event(self.store, event.as_dict(), raised_at=sample.ts)
            if self.snapshots is not None:
                self.snapshots.on_tick(sample, changed, self.analyzer.idle.active()
                                       if self.analyzer is not None else ())
            if self.attribution is not None:
                self.attribution.on_tick(sample)
        if self.on_tick is not None:
            self.on_tick(sample)
        if self.simulation is not None:  # the simulated host's faults are timed in ticks
            self.simulation.ticked(self.tick - self.first_tick)

    def _maintain_until(self, next_tick: float) -> None:
        """Rollups and retention in the gap before the next tick, within a small budget."""
        assert self.store is not None
        budget = min(MAINTENANCE_BUDGET_S, max(0.0, next_tick - clock.now() - 0.05))
        if budget > 0.001:
            self.store.maintain(budget_s=budget)

    async def _discover_forever(self) -> None:
        rounds = 0
        while True:
            await self.discover(scan=rounds % CHILDREN_SCAN_EVERY == 0)
            rounds += 1
            await asyncio.sleep(DISCOVERY_INTERVAL_S)

    def pod_allocations(self) -> dict[str, list[Allocation]]:
        """{GPU UUID: the pods the kubelet allocated it to}, as discovery last asked; {} outside
        Kubernetes. Never blocks."""
        pods = self.procs.owners.pod_resources
        return pods.cached() if pods is not None else {}

    async def discover(self, scan: bool = True) -> None:
        """One round of process discovery now (the loop runs one every DISCOVERY_INTERVAL_S;
        `mlcostd profile` runs one as its command starts). `scan`: a full /proc pass for
        children. Never raises."""
        async with self._discovery:
            _, gpus, uses = self.nvml.latest()
            uses = self._recorded(uses)
            # A filter keeps its own processes, sick GPUs or not: no others are looked for.
            sick = self.nvml.sick_holders() if self.process_filter is None else {}
            uuids = {g.index: g.uuid for g in gpus}
            devices = {pid: tuple(uuids[u.gpu_index] for u in held if u.gpu_index in uuids)
                       for pid, held in uses.items()}  # for the owner's pod (pod-resources)
            try:
                await asyncio.to_thread(self.procs.discover, set(uses), scan, devices, sick)
            except Exception:  # discovery must never take the daemon down
                log.exception("process discovery failed; retrying")
            pods = self.procs.owners.pod_resources
            if pods is not None and pods.available():  # GPUs allocated to pods, for /metrics
                await asyncio.to_thread(pods.devices)  # asks at most every REFRESH_S; never raises
            try:
                await self._refresh_kinds()
            except Exception:  # nor the kinds
                log.exception("classifying workload kinds failed; retrying")
