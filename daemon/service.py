"""mlcostd's asyncio service: one tick per interval, slow work beside it, a clean exit.

The tick reads what the sources hold (NVML readers and process discovery run beside it in
threads), builds one frozen Sample and writes it in one transaction. Store maintenance (rollups,
retention) runs in the gap after the write, within a small time budget, so it never delays a tick.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import math
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon import systemd
from daemon.config import Config, db_path
from daemon.model import Sample
from daemon.nvml import NvmlSource
from daemon.procs import ProcessSource, read_pressure
from daemon.store import Store

log = logging.getLogger(__name__)

DISCOVERY_INTERVAL_S = 2.0  # how soon a new GPU process or DataLoader worker is picked up
MAINTENANCE_BUDGET_S = 0.02


class DaemonError(RuntimeError):
    """The daemon cannot start; the message says why and what to do."""


class WriterLock:
    """One writer per store: a second mlcostd on the same database refuses to start."""

    def __init__(self, db: Path) -> None:
        self.path = db.with_name(db.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = self.path.read_text().strip() or "another process"
            raise DaemonError(
                f"another mlcostd (pid {owner}) is already recording into {self.path.parent}; "
                f"stop it or pass a different --db") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
        self.ticks_late = 0
        self.last_sample: Sample | None = None
        self.host: dict[str, Any] = {}
        self.nvml = NvmlSource(config.nvml, config.daemon.interval)
        self.procs = ProcessSource(children=config.processes.children)
        self.store: Store | None = None
        self._running_scenario: Any = None
        self._stop = asyncio.Event()
        self._lock = WriterLock(self.db)

    # -- start and stop ----------------------------------------------------------------

    def _open_store(self) -> Store:
        try:
            self.db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DaemonError(
                f"cannot create the database folder {self.db.parent}: {exc.strerror}; "
                f"pass --db with a writable path or run as root") from None
        self._lock.acquire()
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

    async def run(self) -> int:
        """Record until SIGTERM/SIGINT (or max_ticks). Returns the process exit code."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop)
        self.store = self._open_store()
        self.tick = self.first_tick = self.store.last_tick  # numbering goes on across restarts
        try:
            if self.simulate:
                self._start_simulation()
            self.host.setdefault("hostname", socket.gethostname())
            self.host["interval_s"] = self.config.daemon.interval
            self.store.set_meta("host", self.host)
            self.nvml.start()
            log.info("recording into %s every %g s", self.db, self.config.daemon.interval)
            systemd.notify("READY=1")
            await self._loop()
        finally:
            systemd.notify("STOPPING=1")
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
            discovery.cancel()
            try:
                await discovery
            except asyncio.CancelledError:
                pass

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
        self.last_sample = sample
        if self.on_tick is not None:
            self.on_tick(sample)

    def _maintain_until(self, next_tick: float) -> None:
        """Rollups and retention in the gap before the next tick, within a small budget."""
        assert self.store is not None
        budget = min(MAINTENANCE_BUDGET_S, max(0.0, next_tick - time.time() - 0.05))
        if budget > 0.001:
            self.store.maintain(budget_s=budget)

    async def _discover_forever(self) -> None:
        while True:
            _, _, uses = self.nvml.latest()
            try:
                await asyncio.to_thread(self.procs.discover, set(uses))
            except Exception:  # discovery must never take the daemon down
                log.exception("process discovery failed; retrying")
            await asyncio.sleep(DISCOVERY_INTERVAL_S)
