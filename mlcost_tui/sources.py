"""Where mlcost-top's data comes from, away from the UI: live daemons (one, or several for the
fleet table) and a recorded store (replay). Each source hands the App frozen HostSnapshots; the
App posts them in one SnapshotArrived message and renders them the same way, live or replayed.

No widgets here. A replay reads the store through daemon.replay's read-only path and
never loads NVML, psutil or the store's writer (tests/tui/test_replay_imports.py checks).
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.clock import local_time, utc_day
from daemon.wire import Now, Phases, one_line
from mlcost_tui import format as fmt
from mlcost_tui.messages import HostSnapshot

if TYPE_CHECKING:
    from daemon.client import Client
    from daemon.replay import Replay

POLL_INTERVAL_S = 1.0
# --interval's range: faster polls cost the daemon a /v1/now each; an hour apart is no live view
POLL_INTERVAL_RANGE_S = (0.1, 3600.0)
# A daemon that does not answer is asked again after 1, 2, 4... intervals, up to RETRY_MAX_S:
# in a fleet, a host that is down (a TCP connect that waits for its timeout, a proxy) costs the
# others nothing. A local unix socket is refused at once when no daemon serves it, so it is
# asked at least every LOCAL_RETRY_MAX_S: a restarted mlcostd shows within a couple of seconds
# (at 10 s, a restart looked like a daemon that would not come back).
RETRY_MAX_S = 10.0
LOCAL_RETRY_MAX_S = 2.0
STARTING_RETRY_S = 0.5
SOONEST_POLL_S = 0.05  # a daemon already due is asked this soon
PHASE_WINDOW_S = 300.0  # a replayed process's phases: the 5 minutes before the tick shown  # an embedded daemon that is still starting: look again soon


class LiveSource:
    """One or more daemons polled for /v1/now; counts failed polls in a row per daemon and keeps
    each daemon's last good answer (shown while it does not answer).

    Each daemon keeps its own pace: one that answers is asked again after the interval, one
    that fails backs off on its own (a fleet with one host down still shows the others every
    second), and a fleet's poll waits at most an interval for its answers: a host that takes
    longer is shown as it last was and its answer is taken at a later poll."""

    def __init__(self, clients: Sequence[Client], interval_s: float = POLL_INTERVAL_S) -> None:
        self.clients = list(clients)
        self.interval_s = interval_s
        self.failures = [0] * len(self.clients)
        self.last_now: list[Now | None] = [None] * len(self.clients)
        self._shown: list[HostSnapshot | None] = [None] * len(self.clients)  # last fetched
        self._due_at = [0.0] * len(self.clients)  # monotonic: when to ask each again
        self._asking: dict[int, asyncio.Task[HostSnapshot]] = {}  # polls not answered yet
        self._answered: set[int] = set()  # fetched since the last retry_delay: to schedule
        self.answered_at: list[float | None] = [None] * len(self.clients)  # fmt.clock()

    async def fetch(self, index: int) -> HostSnapshot:
        from daemon.client import ApiError, ClientError

        client = self.clients[index]
        started = time.monotonic()
        try:
            now = await client.now()
        except ClientError as exc:
            self.failures[index] += 1
            return HostSnapshot(client.name, self.last_now[index], one_line(str(exc)),
                                time.monotonic() - started, fmt.clock(), self.failures[index],
                                stalled=getattr(exc, "timed_out", False),
                                answered_at=self.answered_at[index],
                                refused=isinstance(exc, ApiError) and exc.status in (401, 403))
        self.failures[index] = 0
        self.last_now[index] = now
        received = self.answered_at[index] = fmt.clock()
        return HostSnapshot(client.name, now, None, time.monotonic() - started, received)

    async def fetch_all(self) -> tuple[HostSnapshot, ...]:
        """One snapshot per daemon: those due are polled concurrently (one daemon: awaited
        whatever it takes; several: for at most an interval), the others shown as they last
        were."""
        began = time.monotonic()
        for index in range(len(self.clients)):
            if index not in self._asking and self._due_at[index] <= began:
                self._asking[index] = asyncio.ensure_future(self.fetch(index))
        if self._asking:
            await asyncio.wait(self._asking.values(),
                               timeout=None if len(self.clients) == 1 else self.interval_s)
        for index, task in list(self._asking.items()):
            if task.done():
                del self._asking[index]
                self._shown[index] = task.result()
                self._answered.add(index)
        return tuple(shown if shown is not None else HostSnapshot(
            client.name, None, "waiting for its first answer", time.monotonic() - began,
            fmt.clock()) for client, shown in zip(self.clients, self._shown, strict=True))

    def retry_delay(self, starting: bool) -> float:
        """Seconds until the next poll: until the first daemon is due again (the interval
        after an answer, or a backoff while it fails), at most an interval while a slow
        daemon's answer is awaited."""
        now = time.monotonic()
        for index in self._answered:
            self._due_at[index] = now + self._delay(index, starting)
        self._answered.clear()
        waiting = [self._due_at[i] - now for i in range(len(self.clients))
                   if i not in self._asking]
        if self._asking:
            waiting.append(self.interval_s)
        # (never 0: Textual's set_timer divides by its delay, and a timer that raised never
        # fires: the view froze)
        return max(SOONEST_POLL_S, min(waiting, default=self.interval_s))

    def _delay(self, index: int, starting: bool) -> float:
        """How long until daemon `index` is asked again, after the poll that just ended."""
        failures = self.failures[index]
        if failures == 0:
            if starting and not any(n is not None and n.ts is not None for n in self.last_now):
                return STARTING_RETRY_S  # a daemon that answers but has no tick yet
            return self.interval_s
        if starting and all(n is None for n in self.last_now):
            return STARTING_RETRY_S
        local = getattr(self.clients[index], "socket_path", None) is not None
        longest = max(LOCAL_RETRY_MAX_S, self.interval_s) if local else RETRY_MAX_S
        return min(self.interval_s * 2 ** (failures - 1), longest)

    async def close(self) -> None:
        for task in self._asking.values():
            task.cancel()
        for client in self.clients:
            await client.close()


def open_replay(path: str | Path) -> Replay:
    """The recorded store at `path`, opened read-only (ReplayError says why it cannot be)."""
    from daemon.replay import Replay

    return Replay(path)


class ReplaySource:
    """A recorded store and a position in it (one of its tick times). `read` may be called from
    several worker threads at once (a newer step does not wait for an older one to finish)."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        # The replay's one SQLite connection is not for concurrent transactions: read one at a time.
        self._reading = threading.Lock()
        self.times: list[float] = replay.times()
        self.index = 0
        self.last_now: Now | None = None  # shown again if a later tick cannot be read

    @property
    def path(self) -> Path:
        return self.replay.path

    @property
    def interval_s(self) -> float:
        """The recording's tick interval (how fast `space` plays it)."""
        return self.replay.interval_s

    @property
    def target(self) -> str:
        return f"replay:{self.path.name}"

    @property
    def at_end(self) -> bool:
        return self.index >= len(self.times) - 1

    def clamp(self, index: int) -> int:
        return min(max(index, 0), len(self.times) - 1)

    def minute_from_here(self, step: int) -> int:
        """The index of the tick `step` minutes from the current one (clamped to the recording)."""
        target = self.times[self.index] + 60.0 * step
        index = bisect.bisect_left(self.times, target) if step > 0 else \
            bisect.bisect_right(self.times, target) - 1
        return self.clamp(index)

    def read(self, ts: float) -> HostSnapshot:
        """The state the daemon showed at `ts` (a damaged store gives an error snapshot that
        keeps the last good state: it must not take the UI down)."""
        started = time.monotonic()
        with self._reading:
            try:
                now = Now.from_dict(self.replay.state_at(ts))
            except Exception as exc:
                return HostSnapshot(self.target, self.last_now,
                                    one_line(f"cannot read {self.replay.path} at {ts:.3f}: {exc}"),
                                    time.monotonic() - started, fmt.clock(), 1)
            self.last_now = now
        return HostSnapshot(self.target, now, None, time.monotonic() - started, fmt.clock())

    def phases(self, key: str) -> Phases | None:
        """Process `key`'s phase balance with its top stacks at the tick shown (None: none)."""
        if not self.times:
            return None
        with self._reading:
            balance = self.replay.phases_at(key, self.times[self.index])
        if balance is None:
            return None
        return Phases.from_dict({"key": key, "since_s": PHASE_WINDOW_S, "phases": balance})

    def status(self, playing: bool) -> str | None:
        """The header's replay line: file, time, position and the keys."""
        if not self.times:
            return None
        state = "▶ playing" if playing else "⏸ paused"
        trigger = (self.replay.snapshot or {}).get("trigger") or {}
        why = f"  snapshot: {trigger.get('reason') or trigger.get('kind')}" if trigger else ""
        # Where it is and why it was taken first: the header cuts this line at the terminal's
        # edge (at 80 columns the keys and the file name went past it, and the reason with them)
        return (f"⏵ replay tick {self.index + 1}/{len(self.times)} "
                f"{local_time(self.times[self.index])}  {state}{why}  "
                f"([ ] tick, {{ }} minute, space play)  {self.replay.path.name}")

    def close(self) -> None:
        self.replay.close()


def same_daemon(hosts: Sequence[HostSnapshot]) -> dict[str, str]:
    """The targets that reach a daemon another target reaches too (a unix socket and an http
    URL of one mlcostd: the same daemon_id in their answers), each to the target it is counted
    under: the first of them that answers now, else the first. A daemon that gives no id (an
    older one) is told apart by its target alone."""
    groups: dict[str, list[HostSnapshot]] = {}
    for host in hosts:
        if host.now is not None and host.now.daemon_id:
            groups.setdefault(host.now.daemon_id, []).append(host)
    same: dict[str, str] = {}
    for group in groups.values():
        counted = next((h for h in group if h.error is None), group[0])
        same.update((h.target, counted.target) for h in group if h is not counted)
    return same


def one_per_daemon(hosts: Sequence[HostSnapshot]) -> tuple[HostSnapshot, ...]:
    """`hosts` with each daemon once (same_daemon): the fleet's totals and its count of
    daemons count one daemon reached at two targets once."""
    same = same_daemon(hosts)
    return tuple(h for h in hosts if h.target not in same)


def fleet_totals(hosts: tuple[HostSnapshot, ...]) -> HostSnapshot | None:
    """The fleet header: totals over the daemons that answered, as one synthetic snapshot
    (each daemon once, however many targets reach it); today's spend counts the last known
    spend of those that did not (fleet_header)."""
    return fleet_header(hosts)[0]


def fleet_header(hosts: tuple[HostSnapshot, ...]
                 ) -> tuple[HostSnapshot | None, tuple[HostSnapshot, ...]]:
    """The fleet's totals (fleet_totals), and the daemons that did not answer this poll whose
    last known spend today is in its `spend_today`: money spent does not un-spend when a host
    stops answering (the total went down while its row still showed the host's last figures,
    probe 148 M4). The burn and the waste are rates now: over the daemons that answered only
    (a host that does not answer may be gone, or billing on; its row says its last rate, dimmed,
    "as of"). A last answer of an earlier UTC day is not today's spend."""
    hosts = one_per_daemon(hosts)
    if not hosts:
        return None, ()
    live = [h for h in hosts if h.now is not None and h.error is None]
    if not live:  # none answers: the fleet as last seen, "as of" its newest answer (it read
        # as the first host's own header, under that host's name, over the fleet's table)
        seen = [h for h in hosts if h.now is not None]
        name = f"fleet of {len(hosts)} (0 answering)"
        stalled = all(h.stalled for h in hosts)
        if not seen:
            return HostSnapshot(name, None, "no daemon answers", 0.0, hosts[0].received_at,
                                stalled=stalled), ()
        totals = fleet_totals(tuple(dataclasses.replace(h, error=None) for h in seen))
        assert totals is not None and totals.now is not None
        # today is every host's last known spend: said "(N hosts as of ...)", as when only
        # some hosts do not answer (it read as current, probe 154 L6)
        kept = tuple(h for h in seen if h.now is not None and h.now.spend_today is not None)
        return dataclasses.replace(
            totals, now=dataclasses.replace(totals.now, hostname=name), error="no daemon answers",
            stalled=stalled, answered_at=max((h.answered_at for h in seen
                                              if h.answered_at is not None), default=None)), kept

    def total(values: Iterable[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    nows = [h.now for h in live if h.now is not None]
    # None while no daemon that answers has taken its first tick (just started)
    newest = max((n.ts for n in nows if n.ts is not None), default=None)
    today = utc_day(newest) if newest is not None else None
    kept = tuple(h for h in hosts if h.stale and h.now is not None
                 and h.now.spend_today is not None and h.now.ts is not None
                 and utc_day(h.now.ts) == today)
    fleet = Now(ts=newest, tick=0,
                hostname=f"fleet of {len(hosts)} ({len(live)} answering)", instance={},
                simulated=None, nvml_status="ok", gpus=tuple(g for n in nows for g in n.gpus),
                processes=tuple(p for n in nows for p in n.processes),
                burn_per_hour=total(n.burn_per_hour for n in nows),
                wasted_per_hour=total(n.wasted_per_hour for n in nows),
                spend_today=total([*(n.spend_today for n in nows),
                                   *(h.now.spend_today for h in kept if h.now is not None)]),
                events=tuple(e for n in nows for e in n.events),
                recommendations=tuple(r for n in nows for r in n.recommendations))
    slowest = max(h.latency_s for h in live)
    return HostSnapshot("fleet", fleet, None, slowest, live[0].received_at), kept
