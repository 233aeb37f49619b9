"""The cost ledger: burn integrated over ticks into dollars per process, user, job label and
UTC day and month, plus the storage cost and unit-cost meters; and the job label of a command.

The loop adds a tick (`add`) while threads read (the slow poller's unit costs, the API's
snapshot): every read and write of the ledger's tables holds its lock, so no reader iterates a
table while a tick grows it.
"""

from __future__ import annotations

import bisect
import math
import os
import re
import shlex
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from daemon.analysis.cost import Burn, ProcessKey
from daemon.analysis.latency import LatencyMeter
from daemon.analysis.meters import UNIT_COST_TIMEOUT_S, StorageCost, UnitCostMeter, read_counter
from daemon.clock import utc_day
from daemon.sources.owners import workload_label
from daemon.sources.patterns import MATCHED_CHARS, job_pattern
from daemon.sources.redact import redact_text
from daemon.wire import process_key

# Longest interval between two ticks that the ledger charges; a longer gap (daemon stopped,
# host suspended) is counted as unaccounted time instead of being charged to whoever runs now.
MAX_TICK_GAP_S = 60.0


def recording_gap_s(interval_s: float) -> float:
    """How long without a tick means the recording stopped (or stalled), at this interval."""
    return max(MAX_TICK_GAP_S, 3 * interval_s)


# Each daemon start, as the store records it (meter_readings kind and name;
# daemon.runtime.resume.record_start): a run's ledger charges nothing before its first tick, so
# a report or a replay of a range charges nothing for the time between two runs either.
RUN_START_READING = ("start", "daemon")


def run_starts(readings: Mapping[tuple[str, str], Sequence[tuple[float, float, Any]]]
               ) -> tuple[float, ...]:
    """The daemon starts among a store's meter readings (daemon.store.queries.meter_readings),
    oldest first."""
    return tuple(sorted(ts for ts, _, _ in readings.get(RUN_START_READING, ())))


def started_between(starts: Sequence[float], last: float, ts: float) -> bool:
    """Whether a daemon started after the tick at `last` and by the tick at `ts`: the tick at
    `ts` is then its run's first, charged nothing (sorted `starts`)."""
    index = bisect.bisect_right(starts, last)
    return index < len(starts) and starts[index] <= ts


def tick_seconds(last: float | None, ts: float, max_gap_s: float,
                 starts: Sequence[float] = ()) -> float:
    """The seconds between two recorded ticks that a window's energy counts, as the ledger
    charges them: none after no tick or across a daemon start, at most `max_gap_s`."""
    if last is None or ts <= last or started_between(starts, last, ts):
        return 0.0
    return min(ts - last, max_gap_s)


# Owner keys a process is also charged to (`by_owner`), each as "key:value": a budget or a
# unit cost names one as its job ([cost.budgets.job."namespace:ml"]). A pod is "ns/name".
OWNER_JOB_KEYS = ("namespace", "pod", "slurm_job", "slurm_account", "slurm_partition",
                  "systemd_unit")


# The owner keys of a workload (daemon.api.metrics WORKLOAD_LABELS between job_name and user)
WORKLOAD_OWNER_KEYS = ("pod", "namespace", "container", "slurm_job")


def owner_jobs(owner: Mapping[str, str]) -> list[str]:
    """The "key:value" owner jobs of a process: namespace:ml, pod:ml/trainer-0, slurm_job:42,
    slurm_account:physics, slurm_partition:gpu, systemd_unit:vllm.service."""
    jobs = []
    for key in OWNER_JOB_KEYS:
        value = owner.get(key)
        if not value:
            continue
        if key == "pod":
            if not owner.get("namespace"):
                continue
            value = f"{owner['namespace']}/{value}"
        jobs.append(f"{key}:{value}")
    return jobs


def is_owner_job(name: str) -> bool:
    return name.partition(":")[0] in OWNER_JOB_KEYS


class JobLabeler:
    """A job label per process: the first configured `{name: regex}` that matches its command
    line or its workload (re.search), else its workload ("ns/pod", "slurm 42", a unit, from
    daemon.sources.owners), else the script or module the command runs ('train.py', '-m vllm')."""

    def __init__(self, jobs: Mapping[str, str] | None = None) -> None:
        self.patterns: list[tuple[str, re.Pattern[str]]] = []
        for name, pattern in (jobs or {}).items():
            try:
                self.patterns.append((name, job_pattern(pattern)))
            except ValueError as exc:
                raise ValueError(f"[jobs] {name!r} = {str(pattern)[:200]!r}: {exc}") from None
        self._cache: dict[str, str] = {}

    def label(self, command: str, owner: Mapping[str, str] | None = None) -> str:
        workload = workload_label(owner) if owner else None
        cache_key = f"{workload}\0{command}" if workload else command
        found = self._cache.get(cache_key)
        if found is None:
            found = self._label(command, workload)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[cache_key] = found
        return found

    def _label(self, command: str, workload: str | None = None) -> str:
        if not isinstance(command, str):  # a store's NULL command (shlex.split(None) reads stdin)
            command = ""
        matched = command[:MATCHED_CHARS]  # a hostile command line: bounded backtracking
        for name, pattern in self.patterns:
            if pattern.search(matched) or (workload and pattern.search(workload[:MATCHED_CHARS])):
                return name
        if workload:
            return workload
        try:  # (bounded too: shlex builds each token a character at a time, quadratic in it)
            argv = shlex.split(matched)
        except ValueError:
            argv = matched.split()
        if not argv:
            return "unknown"
        for i, arg in enumerate(argv):
            if arg == "-m" and i + 1 < len(argv):
                return argv[i + 1]
            if arg.endswith(".py"):
                return os.path.basename(arg)
        return os.path.basename(argv[0]) or "unknown"


class CostLedger:
    """Cumulative dollars per process, user, job label and UTC day, integrated tick by tick:
    each tick charges its burn rate over the time since the previous tick (at most
    MAX_TICK_GAP_S; the rest is counted in `unaccounted_seconds`, not charged). Ticks that read
    no GPU (NVML not started) are charged the host's price (daemon.analysis.cost.unread_gpus), so
    they are no unaccounted time: `unread_seconds` counts them. `run_starts`: where it
    replays recorded ticks, the daemon starts among them (run_starts): the first tick after
    one is charged nothing, as the live ledger of that run charged it. `gap_ends`: where it
    replays an even spread of recorded ticks (`max_gap_s` widened to the spread's step), the
    ticks (ms) that end a recording gap longer than MAX_TICK_GAP_S (range_ticks.recording_gaps),
    replayed with the tick before it: that interval is capped at MAX_TICK_GAP_S, as the live
    ledger capped it."""

    def __init__(self, jobs: Mapping[str, str] | None = None,
                 max_gap_s: float = MAX_TICK_GAP_S, run_starts: Sequence[float] = (),
                 gap_ends: Iterable[int] = ()) -> None:
        self.labeler = JobLabeler(jobs)
        self.max_gap_s = max_gap_s
        self.run_starts = tuple(sorted(run_starts))
        self.gap_ends = frozenset(gap_ends)
        self.last_ts: float | None = None
        self.total = 0.0
        self.idle = 0.0
        self.wasted = 0.0
        self.storage = 0.0
        self.seconds = 0.0
        self.unaccounted_seconds = 0.0
        self.unread_seconds = 0.0  # charged at the host's price with no GPU read (in `seconds`)
        self.by_process: dict[ProcessKey, float] = defaultdict(float)
        # The seconds each process was charged, where the dollars came from a store's hour
        # spend (`add_recorded`): its burn over a range is its dollars over them. The live
        # ledger (`add`) leaves it empty: a tick per process per second would cost its loop.
        self.process_seconds: dict[ProcessKey, float] = defaultdict(float)
        self.by_user: dict[str, float] = defaultdict(float)
        self.by_job: dict[str, float] = defaultdict(float)
        self.by_day: dict[str, float] = defaultdict(float)
        self.by_user_day: dict[tuple[str, str], float] = defaultdict(float)
        self.by_job_day: dict[tuple[str, str], float] = defaultdict(float)
        self.by_month: dict[str, float] = defaultdict(float)
        self.by_user_month: dict[tuple[str, str], float] = defaultdict(float)
        self.by_job_month: dict[tuple[str, str], float] = defaultdict(float)
        # Owner jobs ("namespace:ml", "slurm_job:42", owner_jobs): a process counts in each of
        # its own, so these overlap and do not sum to the total as by_job does.
        self.by_owner: dict[str, float] = defaultdict(float)
        self.by_owner_day: dict[tuple[str, str], float] = defaultdict(float)
        self.by_owner_month: dict[tuple[str, str], float] = defaultdict(float)
        self.owner_jobs_of: dict[ProcessKey, list[str]] = {}
        # Per workload ((job label, *WORKLOAD_OWNER_KEYS' owner values, user), as the process
        # had them when charged): [dollars, wasted dollars] since the ledger began,
        # charged tick by tick, so an exited process's last ticks stay in it. The /metrics
        # workload counters take their dollars from here (daemon.api.metrics), not from a
        # process's cost at a scrape (probe 149 H2: what a process spent after the last scrape,
        # or all of it between two scrapes, was lost).
        self.by_workload: dict[tuple[str, ...], list[float]] = {}
        self.job_of: dict[ProcessKey, str] = {}
        self.user_of: dict[ProcessKey, str] = {}
        self.storage_items: list[StorageCost] = []
        self.meters: list[UnitCostMeter] = []
        # What was charged and not yet handed to the store, by UTC hour (its start, Unix
        # seconds): host [seconds, total, idle, wasted, storage, unaccounted seconds], process
        # [seconds, dollars].
        # The daemon writes it every round (daemon.store.facts.write_spend), so a report of a
        # past range reads what this ledger charged.
        self.unrecorded_host: dict[int, list[float]] = {}
        self.unrecorded_processes: dict[tuple[int, ProcessKey], list[float]] = {}
        self.latency: list[LatencyMeter] = []  # [[cost.latency]]: p50/p99 beside the cost
        # process -> the keys its dollars go to this hour (`_keys_of`), forgotten with it
        self._charge_keys: dict[ProcessKey, tuple[Any, ...]] = {}
        # Held by every read and write of the tables above (the loop writes, threads read).
        self.lock = threading.RLock()

    def add(self, burn: Burn) -> float:
        """Charge one tick; returns the seconds charged (0 for the first tick)."""
        with self.lock:
            return self._add(burn)

    def _add(self, burn: Burn) -> float:
        ts = burn.ts
        last, self.last_ts = self.last_ts, ts
        if last is None or ts <= last:
            return 0.0
        if self.run_starts and started_between(self.run_starts, last, ts):
            return 0.0
        dt = ts - last
        cap = self.max_gap_s
        if self.gap_ends and round(ts * 1000) in self.gap_ends:
            cap = min(cap, MAX_TICK_GAP_S)
        if dt > cap:
            self.unaccounted_seconds += dt - cap
            self._note_unaccounted(last, ts - cap)
            dt = cap
        hours = dt / 3600.0
        day = utc_day(ts - dt / 2)  # the interval's midpoint decides its day
        month = day[:7]
        storage = math.fsum(s.per_hour for s in self.storage_items) * hours
        charged = burn.total_per_hour * hours + storage
        self.total += charged
        self.storage += storage
        self.idle += burn.idle_per_hour * hours
        self.wasted += burn.wasted_per_hour * hours
        self.seconds += dt
        if burn.unread_gpus:
            self.unread_seconds += dt
        self.by_day[day] += charged
        self.by_month[month] += charged
        hour = int((ts - dt / 2) // 3600 * 3600)
        host = self.unrecorded_host.setdefault(hour, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        host[0] += dt
        host[1] += charged
        host[2] += burn.idle_per_hour * hours
        host[3] += burn.wasted_per_hour * hours
        host[4] += storage
        # Per process per tick: the keys it is charged under are built once per process and
        # UTC day (_charge's tables, in _charge's order), not a tuple each per tick.
        unrecorded = self.unrecorded_processes
        keys_of = self._charge_keys
        # Wasted dollars this tick of the GPUs that waste (a busy host's: none, nothing to add)
        gpu_wasted = {g.index: g.wasted_per_hour * hours for g in burn.gpus if g.wasted_per_hour}
        by_process, by_user, by_job = self.by_process, self.by_user, self.by_job
        by_user_day, by_job_day = self.by_user_day, self.by_job_day
        by_user_month, by_job_month = self.by_user_month, self.by_job_month
        by_owner, by_owner_day = self.by_owner, self.by_owner_day
        by_owner_month = self.by_owner_month
        for key, proc in burn.processes.items():
            cost = proc.burn_per_hour * hours
            user = proc.user
            keys = keys_of.get(key)
            if keys is None or keys[0] != hour or keys[1] != day or keys[2] != user:
                keys = self._keys_of(key, hour, day, user, proc.command, proc.owner)
            (_, _, _, job, user_day, job_day, user_month, job_month, owners, spent_key,
             workload) = keys
            workload[0] += cost
            if gpu_wasted:  # the waste it holds: its share of each GPU x that GPU's waste
                shares = proc.shares
                if len(shares) == 1:
                    share = shares[0]
                    waste = gpu_wasted.get(share.gpu_index)
                    if waste:
                        workload[1] += share.share * waste
                else:
                    workload[1] += math.fsum(
                        s.share * gpu_wasted.get(s.gpu_index, 0.0) for s in shares)
            for owner_job, owner_day, owner_month in owners:
                by_owner[owner_job] += cost
                by_owner_day[owner_day] += cost
                by_owner_month[owner_month] += cost
            by_process[key] += cost
            by_user[user] += cost
            by_job[job] += cost
            by_user_day[user_day] += cost
            by_job_day[job_day] += cost
            by_user_month[user_month] += cost
            by_job_month[job_month] += cost
            spent = unrecorded.get(spent_key)
            if spent is None:
                spent = unrecorded[spent_key] = [0.0, 0.0]
            spent[0] += dt
            spent[1] += cost
        return dt

    def _job(self, key: ProcessKey, user: str, command: str, owner: Mapping[str, str]) -> str:
        """The process's job; at its first charge its job, user and owner jobs are fixed."""
        job = self.job_of.get(key)
        if job is None:
            job = self.job_of[key] = self.labeler.label(command, owner)
            self.user_of[key] = user
            self.owner_jobs_of[key] = owner_jobs(owner)
        return job

    def _keys_of(self, key: ProcessKey, hour: int, day: str, user: str, command: str,
                 owner: Mapping[str, str]) -> tuple[Any, ...]:
        """The table keys a process's dollars go to in `hour` of `day` (what `_charge` charges),
        kept for its next ticks; its job and owner jobs are fixed at its first charge."""
        month = day[:7]
        job = self._job(key, user, command, owner)
        owners = tuple((o, (o, day), (o, month)) for o in self.owner_jobs_of[key])
        keys = (hour, day, user, job, (user, day), (job, day), (user, month), (job, month),
                owners, (hour, key), self._workload(job, owner, user))
        self._charge_keys[key] = keys
        return keys

    def _workload(self, job: str, owner: Mapping[str, str], user: str) -> list[float]:
        """The [dollars, wasted] of a workload in `by_workload` (made at its first charge)."""
        workload = (job, *(owner.get(k) or "" for k in WORKLOAD_OWNER_KEYS), user)
        spent = self.by_workload.get(workload)
        if spent is None:
            spent = self.by_workload[workload] = [0.0, 0.0]
        return spent

    def workload_spend(self) -> dict[tuple[str, ...], tuple[float, float]]:
        """(dollars, wasted dollars) so far per workload (see `by_workload`)."""
        with self.lock:
            return {workload: (spent[0], spent[1])
                    for workload, spent in self.by_workload.items()}

    def _charge(self, key: ProcessKey, cost: float, day: str, user: str, command: str,
                owner: Mapping[str, str]) -> None:
        """Charge one process's dollars of one interval to its process, user, job and owner
        jobs, on `day` and its month."""
        month = day[:7]
        job = self._job(key, user, command, owner)
        for owner_job in self.owner_jobs_of[key]:
            self.by_owner[owner_job] += cost
            self.by_owner_day[(owner_job, day)] += cost
            self.by_owner_month[(owner_job, month)] += cost
        self.by_process[key] += cost
        self.by_user[user] += cost
        self.by_job[job] += cost
        self.by_user_day[(user, day)] += cost
        self.by_job_day[(job, day)] += cost
        self.by_user_month[(user, month)] += cost
        self.by_job_month[(job, month)] += cost
        self._workload(job, owner, user)[0] += cost

    def _note_unaccounted(self, since: float, until: float) -> None:
        """The part of a recording gap no tick charges, [since, until], in the hour rows of the
        hours it spans (their last item), so a report read from them counts it as this ledger
        did."""
        at = since
        while at < until:
            hour = int(at // 3600 * 3600)
            upto = min(until, hour + 3600.0)
            row = self.unrecorded_host.setdefault(hour, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
            row[5] += upto - at
            at = upto

    def add_recorded(self, ts: float, seconds: float, host: Mapping[str, float],
                     processes: Mapping[ProcessKey, tuple[float, str, str, Mapping[str, str]]],
                     unaccounted: float = 0.0,
                     process_seconds: Mapping[ProcessKey, float] | None = None) -> None:
        """Charge dollars a store recorded (its hour spend, daemon.store.facts.write_spend)
        for `seconds` around `ts`: `host` total, idle, wasted and storage; `processes` key ->
        (dollars, user, command, owner); `unaccounted`: the seconds of recording gaps there
        that no tick charged; `process_seconds`: the seconds each process was charged there
        (`process_seconds`). The same tables as `add` fill, by the same labels."""
        with self.lock:
            self.unaccounted_seconds += unaccounted
            day = utc_day(ts)
            month = day[:7]
            total = host.get("total", 0.0)
            self.total += total
            self.idle += host.get("idle", 0.0)
            self.wasted += host.get("wasted", 0.0)
            self.storage += host.get("storage", 0.0)
            self.seconds += seconds
            self.by_day[day] += total
            self.by_month[month] += total
            for key, (cost, user, command, owner) in processes.items():
                self._charge(key, cost, day, user, command, owner)
            for key, charged in (process_seconds or {}).items():
                self.process_seconds[key] += charged

    def take_unrecorded(self) -> tuple[dict[int, list[float]],
                                       dict[tuple[int, ProcessKey], list[float]]]:
        """What was charged since the last call (see `unrecorded_host`), handed over once."""
        with self.lock:
            taken = self.unrecorded_host, self.unrecorded_processes
            self.unrecorded_host, self.unrecorded_processes = {}, {}
            return taken

    def set_storage(self, items: Iterable[StorageCost]) -> None:
        """The latest storage walk; charged per hour from the next tick on."""
        items = list(items)
        with self.lock:
            self.storage_items = items

    def add_latency(self, meter: LatencyMeter) -> None:
        with self.lock:
            self.latency.append(meter)

    def poll_latency(self, timeout_s: float = UNIT_COST_TIMEOUT_S) -> list[LatencyMeter]:
        """Read each configured latency histogram (blocking, `timeout_s` each), beside the
        tick like the unit-cost counters, with its target's dollars so far (cost per
        request)."""
        with self.lock:
            meters = list(self.latency)
        for meter in meters:
            meter.poll(timeout_s, self.cost_of(meter.target))
        return meters

    def add_meter(self, meter: UnitCostMeter) -> None:
        with self.lock:
            self.meters.append(meter)

    def cost_of(self, target: str) -> float:
        """Cumulative dollars of a job label, an owner job ('namespace:ml'), or of a process
        id 'pid:start_time'."""
        with self.lock:
            if target in self.by_job:
                return self.by_job[target]
            if is_owner_job(target):
                return self.by_owner.get(target, 0.0)
            for key, cost in self.by_process.items():
                if process_key(*key) == target:
                    return cost
            return 0.0

    def process_cost(self, key: ProcessKey) -> tuple[float, str | None]:
        """Cumulative dollars and job label of one process (0 and None when unknown)."""
        with self.lock:
            return self.by_process.get(key, 0.0), self.job_of.get(key)

    def process_costs(self, keys: Iterable[ProcessKey]
                      ) -> dict[ProcessKey, tuple[float, str | None]]:
        """`process_cost` of each key, under one hold of the lock (a /v1/now asks for every
        process each tick)."""
        with self.lock:
            by_process, job_of = self.by_process, self.job_of
            return {key: (by_process.get(key, 0.0), job_of.get(key)) for key in keys}

    def poll_unit_costs(self, timeout_s: float = UNIT_COST_TIMEOUT_S) -> list[UnitCostMeter]:
        """Read each configured counter (blocking, `timeout_s` each): run beside the tick. The
        lock is held only to read the cost, never across the HTTP read."""
        with self.lock:
            meters = list(self.meters)
        for meter in meters:
            try:
                count = read_counter(meter.url, meter.metric, meter.labels, timeout_s)
            except (OSError, ValueError) as exc:
                meter.error = redact_text(f"{meter.url}: {exc}")
                continue
            meter.observe(self.cost_of(meter.target), count)
        return meters

    def forget(self, keys: Iterable[ProcessKey]) -> None:
        """Drop per-process entries of exited processes (their user/job/day totals stay)."""
        with self.lock:
            for key in keys:
                self.by_process.pop(key, None)
                self.process_seconds.pop(key, None)
                self.job_of.pop(key, None)
                self.user_of.pop(key, None)
                self.owner_jobs_of.pop(key, None)
                self._charge_keys.pop(key, None)

    def forget_exited(self, live: set[ProcessKey], keep: int) -> None:
        """Forget every process not in `live`, once more than `keep` are tracked."""
        with self.lock:
            if len(self.by_process) > keep:
                self.forget([k for k in self.by_process if k not in live])

    def as_dict(self, by_process: bool = True) -> dict[str, Any]:
        """The totals, JSON-ready; without `by_process` (a key per process, which /v1/now
        leaves out) when it is False."""
        with self.lock:
            return self._as_dict(by_process)

    def _as_dict(self, by_process: bool = True) -> dict[str, Any]:
        totals: dict[str, Any] = {
            "total": self.total, "idle": self.idle, "wasted": self.wasted,
            "storage": self.storage, "seconds": self.seconds,
            "unaccounted_seconds": self.unaccounted_seconds,
            "unread_seconds": self.unread_seconds,
            "by_user": dict(self.by_user), "by_job": dict(self.by_job),
            "by_owner": dict(self.by_owner),
            "by_day": dict(self.by_day),
        }
        if by_process:
            totals["by_process"] = {process_key(*k): v for k, v in self.by_process.items()}
        totals["storage_items"] = [s.as_dict() for s in self.storage_items]
        totals["unit_costs"] = [m.as_dict() for m in self.meters]
        totals["latency"] = [m.as_dict() for m in self.latency]
        return totals


class BurnRates:
    """A range's burn ($/h) from the ticks a replay charges: each tick's rates weighted by the
    seconds the ledger charged it (`add` with what CostLedger.add returned), so the burn is the
    range's spend over its charged seconds, whatever the ticks' interval (a run at 0.2 s ticks
    beside one at 1 s weighs each second alike, as the hour spend does), and each process's
    its dollars over the seconds it was charged. Where no tick charged anything (a range of
    one tick, each run's first), the plain mean of the ticks read."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.ticks = 0
        self.weighted = [0.0, 0.0, 0.0]  # total, wasted, idle: $/h x seconds charged
        self.plain = [0.0, 0.0, 0.0]  # the same, summed per tick
        # process -> [$/h x seconds, seconds charged, $/h summed, ticks]
        self.processes: dict[ProcessKey, list[float]] = {}

    def add(self, burn: Burn, seconds: float) -> None:
        rates = (burn.total_per_hour, burn.wasted_per_hour, burn.idle_per_hour)
        self.ticks += 1
        self.seconds += seconds
        for i, rate in enumerate(rates):
            self.weighted[i] += rate * seconds
            self.plain[i] += rate
        for key, proc in burn.processes.items():
            found = self.processes.get(key)
            if found is None:
                found = self.processes[key] = [0.0, 0.0, 0.0, 0.0]
            found[0] += proc.burn_per_hour * seconds
            found[1] += seconds
            found[2] += proc.burn_per_hour
            found[3] += 1

    def host(self) -> dict[str, float | None]:
        """total_per_hour, wasted_per_hour, idle_per_hour (None: no tick)."""
        if not self.ticks:
            return dict.fromkeys(("total_per_hour", "wasted_per_hour", "idle_per_hour"))
        sums, over = ((self.weighted, self.seconds) if self.seconds > 0
                      else (self.plain, float(self.ticks)))
        return {"total_per_hour": sums[0] / over, "wasted_per_hour": sums[1] / over,
                "idle_per_hour": sums[2] / over}

    def process(self, key: ProcessKey) -> float | None:
        """One process's burn over the ticks it was in (None: in none)."""
        found = self.processes.get(key)
        if found is None:
            return None
        return found[0] / found[1] if found[1] > 0 else found[2] / found[3]
