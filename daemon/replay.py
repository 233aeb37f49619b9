"""Replay a recorded store: the state a daemon would have shown at any past tick.

`Replay(path).state_at(ts)` returns a document of the same shape as `Daemon.now()` (the API's
/v1/now), rebuilt from the store alone through `StoreReader` (read-only; safe on a copy made with
`sqlite3 src.db "VACUUM INTO 'copy.db'"` or beside a live writer):

- the document itself: daemon.api.document.now_document, the builder the live daemon uses;
- host: the store's meta "host" (hostname, instance, price, [idle].utilization) as recorded;
- gpus and processes: the stored sample at ts and the one before it, through the derived model
  (daemon.analysis.derive: CPU %, I/O wait % are rates between the two);
- price and burn: `daemon.analysis.cost.burn` with the recorded host price; per-process cost so far,
  job label ([cost].jobs as the daemon ran, meta "cost") and today's spend from a `CostLedger`
  over the day's stored samples (at most LEDGER_SAMPLES of them, evenly spread, so a long day is
  an estimate at a coarser step, with the range's first and last ticks and those either side of
  each daemon start, as `mlcostd report` reads them: daemon.analysis.range_ticks);
- serving latency ([[cost.latency]]): each recorded histogram's p50/p99 over the requests between
  its last two readings at or before ts, and the dollars per request over them, as the live
  meter said at that tick;
- phases: `attribution.phase_balances` over the PHASE_WINDOW_S before ts;
- workload kinds: each process's kind as it was at ts (daemon.store.queries.process_kinds,
  the history the daemon writes when a kind changes);
- events, low-utilization windows and recommendations: as the store had them at ts (an event
  that ended later is shown open; a recommendation counts from its first sighting until
  RECOMMENDATION_GRACE_S after its last one, since the rules run every ~30 s (plus the live
  view's [cost].recommendation_hold, recorded in the host meta), or until the live view let it
  go (its resolved notice: its process exited, its hold ran out), with its text as
  it was at ts: daemon.store.queries.recommendation_texts); one snoozed at ts is not listed,
  as the live view hid it then (mlcost-top's `u` listed it), from the snoozes the daemon
  records as they are made and undone (schema.SNOOZE_READING); a store recorded before those
  were kept lists it, with its last snooze's snoozed_until.
"""

from __future__ import annotations

import bisect
import dataclasses
import sqlite3
import statistics
from collections import OrderedDict
from pathlib import Path
from typing import Any

from daemon import clock
from daemon.analysis.balance import LOW_UTILIZATION, MID_UTILIZATION, phase_balances
from daemon.analysis.book import RESOLVED
from daemon.analysis.busy import DEFAULT_IDLE_UTILIZATION_PCT, IdleThresholds
from daemon.analysis.cost import HostPrice, burn
from daemon.analysis.cost_state import ProcessCost
from daemon.analysis.energy import EnergyMeter
from daemon.analysis.idle import event_id
from daemon.analysis.inference_audit import recorded_audit
from daemon.analysis.kinds import recorded_kind
from daemon.analysis.latency import LATENCY_READING, observe_reading, replayed_meters
from daemon.analysis.ledger import CostLedger, recording_gap_s, run_starts
from daemon.analysis.price_history import PRICE_READING, PriceHistory, instance_then
from daemon.analysis.range_ticks import recording_gaps, with_edges
from daemon.analysis.recorded_spend import recorded_ledger
from daemon.api.document import WORKING_SM_SHARE, CostView, now_document
from daemon.sources.sample import Sample
from daemon.store import queries
from daemon.store.errors import damaged_store, is_damaged
from daemon.store.reader import StoreReader, no_store_at
from daemon.store.schema import (
    GPU_READING,
    HOUR,
    KIND_SPEND,
    MICRODOLLARS,
    SCHEMA_VERSION,
    SNOOZE_READING,
    SPEND_METRICS,
    SPEND_UNACCOUNTED,
)
from daemon.store.shape import StoreShapeError, check_shape
from daemon.store.snapshot import snapshot_facts
from daemon.wire import parse_process_key, process_key
from pricing.grid import GridIntensity, grid_intensity

MAX_TIMES = 3000  # times() returns at most this many tick timestamps, evenly spread
PHASE_WINDOW_S = 300.0
RECOMMENDATION_GRACE_S = 90.0
LEDGER_SAMPLES = 240
CACHE_STATES = 64


def _later_text(written: float, summary: str) -> str:
    """A summary written after the tick it is shown at, saying when it is from."""
    return f"(text as evaluated at {clock.local_time(written, date=False)}) {summary}"


class ReplayError(Exception):
    """The file is not a store that can be replayed (missing, not SQLite, no ticks)."""


class Replay:
    """A recorded store, readable at any of its ticks. Never writes to the file."""

    def __init__(self, path: str | Path, *, timeout_s: float = 10.0) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ReplayError(f"{no_store_at(self.path)}; give the path of an mlcostd database "
                              "(a copy: sqlite3 /var/lib/mlcost/mlcost.db \"VACUUM INTO 'x.db'\")")
        # With no -wal beside it (a copy, a stopped daemon's file), read as `mlcostd report`
        # does, so SQLite removes the -wal and -shm it makes on open when it closes: nothing is
        # left beside a file given to replay, and an empty WAL writes nothing into it. With one
        # (a daemon records into it, or a copy took it along), read-only, leaving both as found.
        try:
            self.reader = StoreReader(self.path, timeout_s=timeout_s, tidy=not self.path.with_name(
                self.path.name + "-wal").exists())
        except StoreShapeError as exc:  # a -wal it cannot read where it is: says what to do
            raise ReplayError(str(exc)) from None
        try:
            version = self.reader.query("PRAGMA user_version")[0]["user_version"]
            if version > SCHEMA_VERSION:
                raise ReplayError(f"{self.path} was written by a newer mlcost (store schema "
                                  f"{version}, this one reads up to {SCHEMA_VERSION}); upgrade "
                                  "mlcost to replay it")
            check_shape(self.reader)  # views, virtual tables, missing columns: refused here
            # A snapshot (daemon.store.snapshot) says what it is; a damaged or truncated one is
            # refused here rather than half shown (small files: the check is quick).
            self.snapshot: dict[str, Any] | None = snapshot_facts(self.reader)
            if self.snapshot is not None:
                check = self.reader.query("PRAGMA quick_check(1)")
                result = next(iter(check[0].values())) if check else "no answer"
                if result != "ok":
                    raise ReplayError(f"{self.path} is a damaged snapshot (SQLite: {result}); "
                                      "take it again or copy it again from its source")
            rows = self.reader.query("SELECT ts FROM ticks ORDER BY ts")
            host = queries.recorded_host(self.reader)
        except ReplayError:
            self.reader.close()
            raise
        except StoreShapeError as exc:
            self.reader.close()
            raise ReplayError(str(exc)) from None
        except Exception as exc:  # sqlite3.DatabaseError and friends: not a store
            self.reader.close()
            if isinstance(exc, sqlite3.DatabaseError) and is_damaged(exc):
                raise ReplayError(damaged_store(self.path, exc)) from None
            raise ReplayError(f"{self.path} is not an mlcostd store or snapshot "
                              f"({' '.join(str(exc).split())[:160]}); give "
                              "the path of the daemon's database, a copy of it, or a snapshot "
                              "taken by `mlcostd snapshot`") from None
        self._all_ms = [r["ts"] for r in rows]
        if not self._all_ms:
            self.reader.close()
            raise ReplayError(f"{self.path} has no recorded ticks yet: let mlcostd run a few "
                              "seconds first")
        self.host: dict[str, Any] = dict(host) if isinstance(host, dict) else {}
        # Each tick at the price charged then (daemon.analysis.price_history); a store recorded
        # before prices were kept, at the price it last recorded.
        self._readings = queries.meter_readings(self.reader, self.start, self.end,
                                                kinds=(PRICE_READING, GPU_READING,
                                                       SNOOZE_READING))
        # each recommendation's snoozes, oldest first: id -> [(when, until when; 0: undone)]
        self._snoozes = {name: [(ts, until) for ts, until, _ in found]
                         for (kind, name), found in self._readings.items()
                         if kind == SNOOZE_READING}
        self.prices = PriceHistory.from_readings(self._readings,
                                                 HostPrice.from_dict(self.host.get("price")))
        recorded = self.host.get("interval_s")
        gaps = [b - a for a, b in zip(self._all_ms[:200], self._all_ms[1:201], strict=False)]
        self.interval_s = float(recorded) if isinstance(recorded, int | float) and recorded > 0 \
            else statistics.median(gaps) / 1000 if gaps else 1.0
        recorded_idle = self.host.get("idle_utilization_pct")  # [idle].utilization as it ran
        self.idle_utilization_pct = float(recorded_idle) if isinstance(
            recorded_idle, int | float) else DEFAULT_IDLE_UTILIZATION_PCT
        self.thresholds = IdleThresholds(idle_utilization_pct=self.idle_utilization_pct)
        recorded_low = self.host.get("low_sm_share")  # [attribution].low_sm_share as it ran
        self.working_sm_share = float(recorded_low) if isinstance(
            recorded_low, int | float) else WORKING_SM_SHARE
        # A recommendation stands after its last sighting for the grace, plus the hold the live
        # view had ([cost].recommendation_hold, recorded since hysteresis; older stores none).
        hold = self.host.get("recommendation_hold_s")
        self.recommendation_grace_s = RECOMMENDATION_GRACE_S + (
            float(hold) if isinstance(hold, int | float) and 0 <= hold <= 86400 else 0.0)
        self.jobs: dict[str, str] = queries.recorded_jobs(self.reader) or {}
        self._states: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._days: dict[float, tuple[float, float | None]] = {}  # _day_before, by day

    # -- the timeline ------------------------------------------------------------------------

    def times(self) -> list[float]:
        """Tick timestamps (seconds), oldest first, at most MAX_TIMES (every k-th tick, plus
        the last one so the end of the recording is always reachable)."""
        step = max(1, -(-len(self._all_ms) // MAX_TIMES))
        picked = self._all_ms[::step]
        if picked[-1] != self._all_ms[-1]:
            picked = picked[:-1] + [self._all_ms[-1]] if len(picked) >= MAX_TIMES else \
                picked + [self._all_ms[-1]]
        return [ms / 1000 for ms in picked]

    @property
    def start(self) -> float:
        return self._all_ms[0] / 1000

    @property
    def end(self) -> float:
        return self._all_ms[-1] / 1000

    def tick_at(self, ts: float) -> float:
        """The recorded tick at or before ts (the first tick for an earlier ts)."""
        index = bisect.bisect_right(self._all_ms, round(ts * 1000)) - 1
        return self._all_ms[max(index, 0)] / 1000

    # -- the state ---------------------------------------------------------------------------

    def state_at(self, ts: float) -> dict[str, Any]:
        """The /v1/now document as of the recorded tick at or before ts."""
        index = max(bisect.bisect_right(self._all_ms, round(ts * 1000)) - 1, 0)
        at_ms = self._all_ms[index]
        cached = self._states.get(at_ms)
        if cached is not None:
            self._states.move_to_end(at_ms)
            return cached
        before_ms = self._all_ms[index - 1] if index > 0 else at_ms
        samples = self.reader.samples(before_ms / 1000, at_ms / 1000, max_samples=2)
        sample = self._gpus_then(samples[-1])
        previous = samples[-2] if len(samples) > 1 else None
        state = self._document(sample, previous)
        self._states[at_ms] = state
        if len(self._states) > CACHE_STATES:
            self._states.popitem(last=False)
        return state

    def _gpus_then(self, sample: Sample) -> Sample:
        """`sample` with its GPUs' facts (model, UUID, memory) as recorded then, where a later
        run saw other GPUs (a resize keeps the store; its `gpus` table holds the last)."""
        facts = queries.gpus_then(self._readings, sample.ts)
        if not facts:
            return sample
        return dataclasses.replace(sample, gpus=tuple(
            dataclasses.replace(
                gpu, uuid=then.get("uuid", gpu.uuid), name=then.get("name", gpu.name),
                memory_total_bytes=then["memory_total_bytes"],
                memory_reserved_bytes=then["memory_reserved_bytes"])
            if (then := facts.get(gpu.index)) is not None else gpu for gpu in sample.gpus))

    def phases_at(self, key: str, ts: float,
                  since_s: float = PHASE_WINDOW_S) -> dict[str, Any] | None:
        """One process's phase balance with its top stacks ("pid:start_time") over the since_s
        before the recorded tick at or before ts: what /v1/phases answers live (None: the
        process has no balance then)."""
        index = max(bisect.bisect_right(self._all_ms, round(ts * 1000)) - 1, 0)
        at = self._all_ms[index] / 1000
        for (pid, start), balance in phase_balances(self.reader, at - since_s, at,
                                                    self.interval_s).items():
            if process_key(pid, start) == key:
                return balance
        return None

    def _document(self, sample: Sample, previous: Sample | None) -> dict[str, Any]:
        """The same builder as the live daemon's, over what the store holds at sample.ts."""
        at = sample.ts
        host = dict(self.host)
        host.setdefault("nvml_status", sample.nvml_status)
        host["replay"] = {"path": str(self.path), "start": self.start, "end": self.end,
                          "snapshot": self.snapshot}
        balances = phase_balances(self.reader, at - PHASE_WINDOW_S, at, self.interval_s)
        statuses = {process_key(pid, start): status for (pid, start), status
                    in queries.stack_statuses(self.reader).items()}
        events, windows = self._events(at)
        cost = None
        price = self.prices.at(at)
        if price is not None:
            host["price"] = price.as_dict()
            host["instance"] = instance_then(price, host.get("instance"))
            current = burn(sample, price, self.thresholds)
            ledger, meter = self._ledger(at)
            before, counted_from = self._day_before(at)
            grid = (GridIntensity.from_dict(self.host.get("grid"))  # as the daemon ran
                    or grid_intensity(price.provider, price.region))
            spent = ledger.as_dict()
            by_process = spent.pop("by_process")
            processes = {process_key(*key): ProcessCost(
                proc.burn_per_hour, by_process.get(process_key(*key), 0.0),
                ledger.process_cost(key)[1], None if energy is None else energy.as_dict(grid))
                for key, proc in current.processes.items() for energy in (meter.process(key),)}
            live_burn = current.as_dict()  # the analyzer's snapshot keys, no more
            cost = CostView(
                price=price.as_dict(),
                burn={k: live_burn[k] for k in ("total_per_hour", "wasted_per_hour",
                                                "idle_per_hour", "price_per_gpu",
                                                "price_source", "gpus", "unread_gpus",
                                                "unseen_gpus", "unseen_per_hour",
                                                "warning")},
                ledger=spent, processes=processes, events=events,
                recommendations=self._recommendations(at), energy=meter.snapshot(grid),
                # from the day's start, as the live daemon counts it: what the store recorded
                # of the day before its first tick (its hour spend), and the ticks' since
                spend_today=ledger.by_day.get(clock.utc_day(at), 0.0) + before,
                spend_today_since=counted_from)
        doc = now_document(
            host=host, sample=sample, previous=previous, tick=sample.tick,
            idle_utilization_pct=self.idle_utilization_pct, cost=cost,
            working_sm_share=self.working_sm_share,
            phases={process_key(pid, start): balance
                    for (pid, start), balance in balances.items()},
            stack_statuses=statuses, windows=windows, store=None,
            window_phases=self._window_phases(windows, at),
            kinds={process_key(pid, start): {
                **recorded_kind(doc), "inference": recorded_audit(
                    doc.get("inference") if isinstance(doc, dict) else None)}
                for (pid, start), doc in queries.process_kinds(self.reader, at).items()})
        if cost is None:  # no recorded price: what the store says happened, without dollars
            doc["events"], doc["recommendations"] = events, self._recommendations(at)
        return doc

    def _window_phases(self, windows: list[dict[str, Any]], at: float) -> dict[str, str]:
        """What most of the recent stacks sampled in each window open at `at` say, by process
        key (a window's target), as the live daemon's `phase_now` reads it."""
        found = {}
        for window in windows:
            try:
                pid, start_time = parse_process_key(str(window.get("target")))
            except ValueError:  # (a planted event: not a process's window)
                continue
            phase = queries.latest_phase(self.reader, pid, start_time,
                                         float(window["started_at"]), at)
            if phase is not None:
                found[str(window["target"])] = phase
        return found

    def _day_before(self, at: float) -> tuple[float, float | None]:
        """(dollars, counted from) of at's UTC day before the recording's first tick, from the
        hour spend the daemon's ledger recorded into the store (as the live daemon resumes its
        day): the whole hours before the first tick's hour, and the part of that hour's row
        the ticks do not account for (a snapshot's row holds the hour from before its range).
        `counted from`: where the store's knowledge of the day begins when that is after the
        day's start (a snapshot, a store begun mid-day: the earlier part is not in the file),
        else None. Read once a day of the replay."""
        day_start = clock.utc_day_start(at)
        cached = self._days.get(day_start)
        if cached is not None:
            return cached
        dollars, counted_from = 0.0, None
        if self.start > day_start:
            day = clock.utc_day(at)
            hour = self.start // HOUR * HOUR
            counted_from = self.start
            if hour > day_start:  # the whole hours before (a store that keeps fewer ticks)
                recorded = recorded_ledger(self.reader, day_start, hour, self.jobs)
                if recorded is not None:
                    dollars = recorded[0].by_day.get(day, 0.0)
                first = self.reader.query(
                    "SELECT min(bucket) AS b FROM rollups WHERE res = ? AND kind = ? AND "
                    "bucket >= ? AND bucket < ? AND metric <> ?",  # (an hour a stall spanned)
                    (HOUR, KIND_SPEND, round(day_start * 1000), round(hour * 1000),
                     SPEND_UNACCOUNTED))[0]["b"]
                if first is not None:
                    counted_from = first / 1000
            row = self.reader.query(
                "SELECT sum AS total FROM rollups WHERE res = ? AND kind = ? AND bucket = ? AND "
                "key = 0 AND metric = ?",
                (HOUR, KIND_SPEND, round(hour * 1000), SPEND_METRICS["total"]))
            through = queries.spend_through(self.reader)
            if row and row[0]["total"] is not None and through is not None:
                # what the hour's row holds beyond the ticks' charges up to the hand-over
                until = min(through, hour + HOUR - 0.001, self.end)  # (that day's)
                charged = (self._ledger(until)[0].by_day.get(day, 0.0) if until > self.start
                           else 0.0)
                earlier = row[0]["total"] / MICRODOLLARS - charged
                if earlier > 0.005:  # a cent: not the two ledgers' rounding
                    dollars += earlier
                    counted_from = min(counted_from, hour)
            if counted_from <= day_start:
                counted_from = None
        self._days[day_start] = dollars, counted_from
        return dollars, counted_from

    def _ledger(self, at: float) -> tuple[CostLedger, EnergyMeter]:
        """Spend and energy from the start of ts's UTC day (or of the recording) up to ts, with
        the job labels the daemon gave (the energy split as the live daemon's, over the same
        sampled ticks), and its latency meters fed the readings up to ts as the ledger's charges
        pass them (the live daemon reads them beside its ticks, with the target's dollars so
        far: the cost per request)."""
        day_start = clock.utc_day_start(at)
        since = max(day_start, self.start)
        spread = self.reader.samples(since, at, max_samples=LEDGER_SAMPLES)
        step = (at - since) / max(len(spread) - 1, 1)
        readings = queries.meter_readings(self.reader, since, at)
        starts = run_starts(readings)
        # with the range's first and last ticks and those either side of each daemon start,
        # as `mlcostd report` reads them (range_ticks): the spend the report says
        # (and of each recording gap inside a run: one read of the range's tick times for both)
        gaps = recording_gaps(self.reader, since, at)
        samples = with_edges(self.reader, spread, since, at, starts, gaps)
        ledger = CostLedger(self.jobs, max_gap_s=max(recording_gap_s(self.interval_s), 1.5 * step),
                            run_starts=starts, gap_ends=frozenset(ts for _, ts in gaps))
        energy = EnergyMeter(ledger.labeler.label)
        meters = replayed_meters(readings)
        for meter in meters.values():
            ledger.add_latency(meter)
        pending = sorted(((ts, name, detail) for (kind, name), found in readings.items()
                          if kind == LATENCY_READING for ts, _, detail in found if ts <= at),
                         key=lambda reading: (reading[0], reading[1]))
        for sample in samples:
            price = self.prices.at(sample.ts)
            if price is None:  # before any price the store knows: not charged
                continue
            energy.add(sample, ledger.add(burn(sample, price, self.thresholds)))
            while pending and pending[0][0] <= sample.ts:
                _, name, detail = pending.pop(0)
                observe_reading(meters[name], detail, ledger.cost_of(meters[name].target))
        for _, name, detail in pending:  # read after the last sample, at or before ts
            observe_reading(meters[name], detail, ledger.cost_of(meters[name].target))
        return ledger, energy

    def _events(self, at: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(events, open low-utilization windows) as the store had them at `at`: an event that
        ended later is shown open. Windows are kept apart, as the live daemon keeps them."""
        events, windows = [], []
        for event in queries.events(self.reader, at - clock.DAY_S, at):
            # not before the daemon raised it: an idle event starts where the idle period did
            if (event.pop("raised_at") or event["started_at"]) > at:
                continue
            ended = event["ended_at"]
            event["ended_at"] = ended if ended is not None and ended <= at else None
            if event["kind"] == LOW_UTILIZATION:
                if event["ended_at"] is None:
                    windows.append(event)
                continue
            if event["kind"] == MID_UTILIZATION:  # stacks sampled at work: neither, as live
                continue
            event["id"] = event_id(event["kind"], event["target"], event["started_at"])
            detail = event.get("detail")  # as live: a text detail, else the target is shown
            event["detail"] = detail if isinstance(detail, str) else ""
            events.append(event)
        return events, windows

    def _recommendations(self, at: float) -> list[dict[str, Any]]:
        """The recommendations standing at `at`, each with its text as it was then (the latest
        recommendation_texts row at or before `at`). A text from after `at` (a store that
        kept texts only from a later upgrade on, or none: the recommendations row's latest)
        says when it is from."""
        since = at - self.recommendation_grace_s
        found = queries.recommendations(self.reader, since)
        texts = queries.recommendation_texts(self.reader, since, at)
        resolved = self._resolved_by(since, at)
        shown = []
        for rec in found:
            if rec["first_seen"] > at:
                continue
            went = resolved.get(f"{rec['rule']} {rec['target']}")
            if went is not None and rec["last_seen"] < went:
                continue  # resolved by `at` (its process exited, or its hold ran out)
            snoozes = self._snoozes.get(str(rec.get("id")))
            snoozed_until = rec.get("snoozed_until")  # (a store from before snoozes were kept)
            if snoozes is not None:
                made = [until for when, until in snoozes if when <= at]
                snoozed_until = made[-1] if made and made[-1] > at else None
                if snoozed_until is not None:
                    continue  # snoozed at `at`: hidden live (listed by mlcost-top's `u`)
            rec = dict(rec, snoozed_until=snoozed_until)
            text = texts.get(rec["id"])
            if text is not None:
                written, body = text
                rec = dict(body, first_seen=rec["first_seen"], last_seen=rec["last_seen"],
                           snoozed_until=snoozed_until)
                if written > at:
                    rec["summary"] = _later_text(written, rec["summary"])
                elif isinstance(body.get("evidence_seconds"), int | float):
                    # it stood since its text was written: evidence grows one for one
                    rec["evidence_seconds"] = body["evidence_seconds"] + max(
                        min(at, rec["last_seen"]) - written, 0.0)
            elif rec["last_seen"] > at + RECOMMENDATION_GRACE_S:
                rec = dict(rec, summary=_later_text(rec["last_seen"], rec["summary"]))
            shown.append(rec)
        return shown

    def _resolved_by(self, since: float, at: float) -> dict[str, float]:
        """When each recommendation that the live view let go in [since, at] went, by its
        resolved notice's target ("rule target", daemon.analysis.book.resolved_notice). The
        store keeps one notice per recommendation, its latest: one seen after it (its
        recommendations row's last_seen later) came back, and stands as the grace says."""
        went: dict[str, float] = {}
        for event in queries.events(self.reader, since, at):
            ended = event["ended_at"]
            if event["kind"] == RESOLVED and ended is not None and ended <= at:
                went[event["target"]] = max(ended, went.get(event["target"], ended))
        return went

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
