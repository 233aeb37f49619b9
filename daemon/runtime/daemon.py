"""mlcostd's asyncio service: one tick per interval, slow work beside it, a clean exit.

The tick reads what the sources hold (NVML readers and process discovery run beside it in
threads), builds one frozen Sample and writes it in one transaction. Store maintenance (rollups,
retention) runs in the gap after the write, within a small time budget, so it never delays a tick.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from daemon.analysis import phases
from daemon.analysis.analyzer import Analyzer
from daemon.analysis.balance import checkpoint_times, phase_balances
from daemon.analysis.cost import host_price
from daemon.analysis.idle import IdleThresholds
from daemon.api.document import gpu_view, process_view
from daemon.config import Config, db_path, unit_cost_meter
from daemon.runtime import systemd
from daemon.runtime.attribution import Attribution
from daemon.sources.nvml import NvmlSource
from daemon.sources.procs import ProcessSource, read_pressure
from daemon.sources.sample import Sample
from daemon.store import facts
from daemon.store.lock import StoreLocked, WriterLock
from daemon.store.writer import Store
from daemon.wire import process_key

log = logging.getLogger(__name__)

DISCOVERY_INTERVAL_S = 2.0  # how soon a new GPU process is picked up
CHILDREN_SCAN_EVERY = 5  # rounds between full scans for children (workers of known processes)
FIRST_EVALUATION_S = 2.0  # the first advice comes this soon after start (few rules fire yet)
MAINTENANCE_BUDGET_S = 0.02


class DaemonError(RuntimeError):
    """The daemon cannot start; the message says why and what to do."""


class Daemon:
    def __init__(
        self,
        config: Config,
        *,
        simulate: str | None = None,
        on_tick: Callable[[Sample], None] | None = None,
        max_ticks: int | None = None,
    ) -> None:
        self.config = config
        self.simulate = simulate
        self.on_tick = on_tick
        self.max_ticks = max_ticks
        self.db = db_path(config)
        self.tick = self.first_tick = 0
        self.started_at = time.time()
        self.ticks_late = 0
        self.last_sample: Sample | None = None
        self.previous_sample: Sample | None = None
        self.host: dict[str, Any] = {}
        self.nvml = NvmlSource(config.nvml, config.daemon.interval)
        self.procs = ProcessSource(children=config.processes.children)
        self.store: Store | None = None
        self._running_scenario: Any = None
        self._stop = asyncio.Event()
        self._lock = WriterLock(self.db)
        self.api: Any = None  # daemon.api.server.ApiServer while running
        self.analyzer: Analyzer | None = None
        self.attribution: Attribution | None = None
        self.phases_now: dict[str, dict[str, Any]] = {}  # process key -> recent phase balance
        self.snoozed: dict[str, float] = {}  # recommendation id -> snoozed until (epoch s)

    # -- start and stop ----------------------------------------------------------------

    def _open_store(self) -> Store:
        try:
            self.db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DaemonError(
                f"cannot create the database folder {self.db.parent}: {exc.strerror}; "
                f"pass --db with a writable path or run as root") from None
        try:
            self._lock.acquire()
        except StoreLocked as exc:
            raise DaemonError(str(exc)) from None
        store_config = self.config.store
        return Store(
            str(self.db),
            raw_retention_s=store_config.raw_retention,
            minute_retention_s=store_config.minute_retention,
            hour_retention_s=store_config.hour_retention,
            max_bytes=store_config.max_size,
        )

    def _start_simulation(self) -> None:
        from daemon.sim import nvml as sim_nvml
        from daemon.sim import scenario

        try:
            loaded = scenario.load(self.simulate)
        except scenario.ScenarioError as exc:
            raise DaemonError(str(exc)) from None
        self._running_scenario = scenario.start(loaded)
        sim_nvml.install(self._running_scenario.state_dir)
        # The simulated GPU's kernel call blocks while the GPU works, as a CUDA kernel would:
        # a stack inside it is compute, and its frames are not the user's code.
        phases.register_runtime("*/daemon/sim/device.py", "*kernel", phases.COMPUTE,
                                "running a kernel on the (simulated) GPU")
        self.host["simulated"] = loaded.name
        self.host["instance"] = {
            "provider": loaded.instance.provider,
            "type": loaded.instance.type,
            "region": loaded.instance.region,
            "lifecycle": loaded.instance.lifecycle,
            "source": f"simulated scenario {loaded.name!r}",
        }
        log.info("simulating %r: %d x %s, workloads %s", loaded.name, loaded.gpu_count,
                 loaded.gpu_model,
                 ", ".join(f"{name} (pid {pid})" for name, pid, _ in
                           self._running_scenario.workloads))

    def _stop_simulation(self) -> None:
        if self._running_scenario is None:
            return
        from daemon.sim import nvml as sim_nvml

        sim_nvml.uninstall()
        self._running_scenario.stop()
        self._running_scenario = None

    def request_stop(self) -> None:
        self._stop.set()

    # -- the HTTP API (daemon/api.py) --------------------------------------------------------

    def _make_api(self) -> Any:
        from daemon.api.server import ApiServer
        from daemon.config import socket_path

        api = self.config.api
        return ApiServer(self, socket_path(self.config), listen=api.listen or None,
                         token_file=api.token_file or None)

    async def _start_api(self) -> None:
        from daemon.api.server import ApiError

        try:
            await self.api.start()
        except ApiError as exc:
            if self.config.api.socket or self.config.api.listen or "another mlcostd" not in str(
                    exc):
                raise DaemonError(str(exc)) from None
            # The default socket belongs to another recorder: record anyway, without an API.
            log.warning("%s; recording without an API", exc)
            await self.api.stop()
            self.api = None

    def _recommendation(self, rec_id: str) -> dict[str, Any] | None:
        for rec in self.now().get("recommendations") or []:
            if rec.get("id") == rec_id:
                return rec
        return None

    def apply_recommendation(self, rec_id: str, dry_run: bool = True) -> dict[str, Any] | None:
        """What the recommendation's action does (dry run) or did; None if it is not active."""
        from daemon.api import actions

        rec = self._recommendation(rec_id)
        if rec is None:
            return None
        instance_id = (self.host.get("instance") or {}).get("id")
        return actions.apply(rec, dry_run, allow_actions=self.config.api.allow_actions,
                             instance_id=instance_id).as_dict()

    def snooze_recommendation(self, rec_id: str, hours: float) -> float | None:
        """Hide a recommendation for `hours`; returns until when, or None if it is not active."""
        if self._recommendation(rec_id) is None:
            return None
        until = time.time() + hours * 3600
        book = getattr(getattr(self, "analyzer", None), "book", None)
        if book is not None:
            book.snooze(rec_id, until)
        self.snoozed[rec_id] = until
        return until

    async def run(self) -> int:
        """Record until SIGTERM/SIGINT (or max_ticks). Returns the process exit code."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop)
        self.store = self._open_store()
        self.tick = self.first_tick = self.store.last_tick  # numbering goes on across restarts
        self.started_at = time.time()
        try:
            if self.simulate:
                self._start_simulation()
            self.host.setdefault("hostname", socket.gethostname())
            self.host["interval_s"] = self.config.daemon.interval
            self.store.set_meta("host", self.host)
            self.nvml.start()
            self.analyzer = await asyncio.to_thread(self._make_analyzer)
            self.attribution = Attribution(self.config.attribution, self.store)
            self.api = self._make_api()
            await self._start_api()
            log.info("recording into %s every %g s", self.db, self.config.daemon.interval)
            systemd.notify("READY=1")
            await self._loop()
        finally:
            systemd.notify("STOPPING=1")
            if self.api is not None:
                await self.api.stop()
            if self.attribution is not None:
                await self.attribution.stop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            self.nvml.stop()
            self._stop_simulation()
            self.store.close()
            self._lock.release()
            log.info("stopped after %d ticks; everything recorded is in %s",
                     self.tick - self.first_tick, self.db)
        return 0

    # -- the loop ----------------------------------------------------------------------

    async def _loop(self) -> None:
        interval = self.config.daemon.interval
        discovery = asyncio.create_task(self._discover_forever(), name="process-discovery")
        evaluation = asyncio.create_task(self._evaluate_forever(), name="recommendations")
        watchdog = systemd.watchdog_interval()
        last_watchdog = 0.0
        next_tick = math.ceil(time.time() / interval) * interval
        try:
            while not self._stop.is_set():
                delay = next_tick - time.time()
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
                if next_tick < time.time():  # fell behind: skip to the next boundary, say so
                    missed = math.ceil((time.time() - next_tick) / interval)
                    self.ticks_late += missed
                    next_tick += missed * interval
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
        """The latest state as a JSON-ready document (the API's /v1/now; see the README)."""
        sample, previous = self.last_sample, self.previous_sample
        host = dict(self.host, nvml_status=self.nvml.status,
                    driver_version=self.nvml.driver_version)
        if sample is None:
            return {"version": 1, "host": host, "ts": None, "tick": self.tick, "gpus": [],
                    "processes": []}
        before = {p.key: p for p in previous.processes} if previous else {}
        gap = sample.ts - previous.ts if previous else 0.0
        snapshot = self.analyzer.snapshot() if self.analyzer is not None else None
        costs = snapshot["processes"] if snapshot is not None else {}
        return {
            "version": 1,
            "host": host,
            "ts": sample.ts,
            "tick": sample.tick,
            "gpus": [gpu_view(gpu) for gpu in sample.gpus],
            "processes": [self._with_cost_and_phases(
                process_view(proc, before.get(proc.key), gap), costs)
                for proc in sample.processes],
            "store": self.store.health.as_dict() if self.store else None,
            **self._cost_and_phases(snapshot),
        }

    def _with_cost_and_phases(self, view: dict[str, Any],
                              costs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        key = view["key"]
        cost = costs.get(key)
        view["burn_per_hour"] = cost["burn_per_hour"] if cost else None
        view["cost"] = cost["cost"] if cost else None
        view["job"] = cost["job"] if cost else None
        balance = self.phases_now.get(key)
        view["phases"] = {phase: part["share"] for phase, part in balance.items()} if balance else {}
        view["phase"] = max(view["phases"], key=view["phases"].get) if view["phases"] else None
        status = self.attribution.status_by_key.get(key) if self.attribution else None
        view["stack_status"] = status["status"] if status else None
        return view

    def _cost_and_phases(self, snapshot: dict[str, Any] | None) -> dict[str, Any]:
        """The analyzer's burn, events and recommendations; the open low-utilization windows."""
        extra: dict[str, Any] = {}
        if snapshot is not None:
            extra["price"] = snapshot["burn"]["price"]
            extra["burn"] = {k: v for k, v in snapshot["burn"].items() if k != "price"}
            extra["cost"] = snapshot["cost"]
            extra["events"] = snapshot["events"]
            extra["recommendations"] = [
                r for r in snapshot["recommendations"]
                if self.snoozed.get(r["id"], 0) <= time.time()]
        if self.attribution is not None:  # low-utilization windows open now (not idle alerts)
            extra["windows"] = self.attribution.active_windows()
        return extra

    def _make_analyzer(self) -> Analyzer:
        """Price the host (config, simulated scenario, or detection) and build the analyzer."""
        from pricing import Catalog, detect

        wanted = self.config.instance
        override: dict[str, Any] = {
            k: v for k, v in (("provider", wanted.provider), ("type", wanted.type),
                              ("region", wanted.region), ("lifecycle", wanted.lifecycle)) if v}
        if self.simulate and not override:
            override = {k: v for k, v in self.host["instance"].items() if k != "source"}
        instance = detect(override or None)
        catalog = Catalog.load()
        gpus = len(self.nvml.latest()[1]) or None
        price = host_price(instance, catalog, wanted.price_per_hour, wanted.lifecycle,
                           gpu_count_seen=gpus)
        self.host["price"] = price.as_dict()
        self.host.setdefault("instance", {
            "provider": instance.provider, "type": instance.instance_type,
            "region": instance.region, "lifecycle": instance.lifecycle,
            "source": instance.source})
        self.store.set_meta("host", self.host)
        log.info("price: $%.4f/h for the host (%s)", price.per_hour, price.source)
        idle = self.config.idle
        thresholds = IdleThresholds(
            idle_utilization_pct=idle.utilization,
            resume_utilization_pct=max(idle.utilization * 2, idle.utilization + 5),
            gpu_held_after_s=idle.gpu_held_after, gpu_unheld_after_s=idle.gpu_unheld_after,
            host_after_s=idle.host_after)
        cost = self.config.cost
        limits = {"idle_held_min_s": idle.gpu_held_after, "host_idle_min_s": idle.host_after,
                  "shrink_min_window_s": cost.shrink_min_window,
                  "spot_min_runtime_s": cost.spot_min_runtime}
        meters = [unit_cost_meter(table) for table in cost.unit_costs]
        return Analyzer(price, catalog, thresholds, jobs=cost.jobs, budgets=cost.budgets,
                        storage_paths={path: cost.storage_price_per_gb_month
                                       for path in cost.storage_paths},
                        unit_costs=meters, limits=limits)

    async def _evaluate_forever(self) -> None:
        """Every [cost].evaluate_every: phase balances from the store, then the rules."""

        every = self.config.cost.evaluate_every
        await asyncio.sleep(min(every, FIRST_EVALUATION_S))
        while True:
            try:
                until = time.time()
                since = until - min(1800.0, max(60.0, until - self.started_at))
                balances, checkpoints = await asyncio.to_thread(
                    self._read_attribution, since, until)
                self.phases_now = {process_key(pid, start): balance
                                   for (pid, start), balance in balances.items()}
                if self.analyzer is not None:
                    await asyncio.to_thread(self.analyzer.poll_slow)
                    # The rules take a while at many processes: in a thread, on a copy.
                    found = await asyncio.to_thread(
                        self.analyzer.analyze, self.analyzer.inputs(), balances, checkpoints)
                    self.analyzer.record(found)
                    for event in self.analyzer.idle.active():  # their cost so far grows
                        facts.write_event(self.store, event.as_dict())
                    facts.write_recommendations(
                        self.store, [r.as_dict() for r in found], until)
            except Exception:  # the rules must never take the recorder down
                log.exception("evaluating recommendations failed; trying again later")
            await asyncio.sleep(every)

    def _read_attribution(self, since: float,
                          until: float) -> tuple[dict[Any, Any], dict[str, list[float]]]:
        """Phase balances and observed checkpoint times over [since, until], from the store."""
        reader = Store.reader(str(self.db), timeout_s=5.0)
        try:
            return (phase_balances(reader, since, until, self.config.daemon.interval),
                    checkpoint_times(reader, since, until))
        finally:
            reader.close()

    def phases_for(self, key: str, since_s: float) -> dict[str, Any] | None:
        """Phase balance of one process ("pid:start_time") over the last since_s seconds."""
        until = time.time()
        balances, _ = self._read_attribution(until - since_s, until)
        for (pid, start), balance in balances.items():
            if process_key(pid, start) == key:
                return balance
        return None

    def collect(self) -> Sample:
        """Build this tick's Sample from what the sources hold. Never blocks on a source."""
        nvml_status, gpus, uses = self.nvml.latest()
        processes = self.procs.read(uses)
        return Sample(
            ts=time.time(), tick=self.tick + 1, gpus=gpus, processes=processes,
            host=read_pressure(), nvml_status=nvml_status)

    def _tick(self) -> None:
        sample = self.collect()
        self.tick = sample.tick
        assert self.store is not None
        self.store.write(sample)
        self.previous_sample, self.last_sample = self.last_sample, sample
        if self.analyzer is not None:
            for event in self.analyzer.update(sample):
                facts.write_event(self.store, event.as_dict())
        if self.attribution is not None:
            self.attribution.on_tick(sample)
        if self.on_tick is not None:
            self.on_tick(sample)

    def _maintain_until(self, next_tick: float) -> None:
        """Rollups and retention in the gap before the next tick, within a small budget."""
        assert self.store is not None
        budget = min(MAINTENANCE_BUDGET_S, max(0.0, next_tick - time.time() - 0.05))
        if budget > 0.001:
            self.store.maintain(budget_s=budget)

    async def _discover_forever(self) -> None:
        rounds = 0
        while True:
            _, _, uses = self.nvml.latest()
            scan = rounds % CHILDREN_SCAN_EVERY == 0  # a full /proc pass: not every round
            rounds += 1
            try:
                await asyncio.to_thread(self.procs.discover, set(uses), scan)
            except Exception:  # discovery must never take the daemon down
                log.exception("process discovery failed; retrying")
            await asyncio.sleep(DISCOVERY_INTERVAL_S)
