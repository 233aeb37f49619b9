"""`mlcostd report`: what the host did over a window, as a JSON document and as text.

The JSON document is a contract (documented in the README): top-level `host`, `window`,
`gpus` and `processes`; later features add keys, never rename them.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

from daemon import clock
from daemon.analysis import latency_report
from daemon.analysis.balance import MID_UTILIZATION, SAMPLED, phase_balances
from daemon.analysis.busy import DEFAULT_IDLE_UTILIZATION_PCT, IdleThresholds
from daemon.analysis.cost import HostPrice, unseen_json
from daemon.analysis.gpu_models import split_by_model
from daemon.analysis.idle import costed_to
from daemon.analysis.inference_audit import recorded_audit, with_savings
from daemon.analysis.ledger import (
    BurnRates,
    CostLedger,
    JobLabeler,
    recording_gap_s,
    run_starts,
    tick_seconds,
)
from daemon.analysis.price_history import PriceHistory, as_then
from daemon.analysis.range_ticks import edge_ticks, not_recorded_s, recording_gaps, tick_before
from daemon.analysis.recommendations_at import as_of as _as_of
from daemon.analysis.recommendations_at import evidence_note as _evidence_note
from daemon.analysis.recommendations_at import money_text, potential_lines
from daemon.analysis.recommendations_at import with_resolutions as _with_resolutions
from daemon.analysis.recommendations_at import with_savings as _recommendations_review
from daemon.analysis.recorded_spend import (
    CostBetween,
    recorded_cost_between,
    recorded_ledger,
    unit_costs,
    unit_meters,
    unrecorded,
)
from daemon.analysis.rules.base import plural
from daemon.analysis.timeline import RAW_MAX_SPAN_S as TIMELINE_RAW_MAX_SPAN_S
from daemon.analysis.timeline import RawWindow, cost_sample_count, raw_sample_count, sampled_gap_s
from daemon.analysis.timeline import build as build_timeline
from daemon.commands import report_energy, report_latency
from daemon.commands import review as team_review
from daemon.config import Config
from daemon.runtime import price_host
from daemon.sources.safe_text import lines, one_line
from daemon.store import queries
from daemon.store.reader import StoreReader
from daemon.store.schema import TICKS_DROPPED, ended_by_recording_stop
from daemon.store.snapshot import snapshot_facts
from daemon.wire import (
    COMPUTE,
    HIGH_CONFIDENCE,
    LOW_CONFIDENCE,
    LOW_CONFIDENCE_MARK,
    cells,
    crop,
    money,
    pad,
    phase_label,
    short_command,
)
from pricing.offcloud import gpus_energy_per_hour
from pricing.offer import HOURS_PER_MONTH

REPORT_VERSION = 1
WRAP_WIDTH = 118  # long price lines wrap inside render_text's 120 columns instead of being cut
DEFAULT_SPAN_S = 3600.0  # the window of a store a daemon records into, without --since
# Longer windows read the GPUs and processes from the rollups (a day of 64 processes is
# millions of raw rows: issue 23; the reader's raw process reads stop at 15 min too); shorter
# ones the raw samples. Spend comes from the samples (at most 600 of them, each charged like
# a tick) up to SAMPLED_SPEND_MAX_S, from the hour spend the daemon recorded beyond (an hour
# cut by the window is placed by its raw ticks: queries.spend_by_day).
RAW_MAX_SPAN_S = 900.0
SAMPLED_SPEND_MAX_S = 6 * 3600.0
BY_KEYS = ("kind", "job", "user")  # what the review can split spend by (--by)


def parse_by(value: str) -> tuple[str, ...]:
    """--by 'kind,job,user' -> ('kind', 'job', 'user'); ValueError names a key it lacks."""
    keys = tuple(k.strip() for k in value.split(",") if k.strip())
    unknown = [k for k in keys if k not in BY_KEYS]
    if unknown or not keys:
        raise ValueError(f"--by {value[:80]!r}: use any of {', '.join(BY_KEYS)}, "
                         "comma-separated")
    return keys


def resolve_window(reader: StoreReader, since_s: float | None,
                   until: float | None) -> tuple[float, float]:
    """The window [start, end] a report covers, from --since and --until (None: not given).

    A store a daemon records into (or one not asked: `reader.recording` None) ends now and
    reaches back 1 h by default. A snapshot or a stopped store ends at its last sample and, without
    --since, covers its whole recorded range: a file read an hour after it was taken still
    reports what it holds (an --until before that range: 1 h, as live)."""
    recorded = queries.recorded_range(reader)
    live = reader.recording is not False or recorded is None
    if until is None:
        until = clock.now() if live or recorded is None else recorded[1]
    if since_s is None:
        if live or recorded is None or until <= recorded[0]:
            # (an --until before a stopped store's first record: the default reach, not a
            # window of no length, which the report then said was "from T to T")
            return until - DEFAULT_SPAN_S, until
        return recorded[0], until
    return until - since_s, until


def build(reader: StoreReader, since_s: float, until: float | None = None,
          config: Config | None = None,
          recommendations_since_s: float | None = None,
          by: tuple[str, ...] = ("kind", "job", "user")) -> dict[str, Any]:
    """The report over the last `since_s` seconds (ending now, or at `until`). `config` gives
    the price cache, extra catalogs, $/kWh and [pricing].compare_managed (default: defaults).
    `recommendations_since_s` widens the window for recommendations only (a live view shorter
    than the rules' period would otherwise lose them between two evaluations)."""
    config = config or Config()
    end = until if until is not None else clock.now()
    start = end - since_s
    host = queries.recorded_host(reader)
    for fact in ("hostname", "instance", "price", "interval_s", "evaluate_every_s"):
        host.setdefault(fact, None)  # (a store with nothing recorded: null, not left out)
    latest = reader.latest()
    host["nvml_status"] = latest.nvml_status if latest else None
    host["last_sample_at"] = latest.ts if latest else None
    interval = float(host.get("interval_s") or 1.0)
    rolled = _from_rollups(reader, start, end, interval)
    summary = reader.rollup_summary(start, end) if rolled else reader.window_summary(start, end)
    # The recorder stopped (no sample for a while): open events were open when it stopped.
    # (A file no daemon records into has stopped, wherever its window ends.)
    stopped = latest is not None and (reader.recording is False
                                      or end - latest.ts > recording_gap_s(interval))
    host["recording_stopped_at"] = latest.ts if stopped and latest is not None else None
    # A snapshot's range ends where it was taken, not where a recording stopped (the events
    # open then were open at its end: the recorder may still be running)
    facts = snapshot_facts(reader)
    until = facts.get("until") if facts else None
    host["snapshot_until"] = float(until) if isinstance(until, int | float) and not isinstance(
        until, bool) and math.isfinite(until) else None
    balances = phase_balances(reader, start, end, interval, summary["processes"])
    statuses = queries.stack_statuses(reader)
    price = host.get("price")
    gpus = summary["gpus"]
    processes = summary["processes"]
    recorded_idle = host.get("idle_utilization_pct")  # [idle].utilization as the daemon ran
    thresholds = IdleThresholds(idle_utilization_pct=float(recorded_idle) if isinstance(
        recorded_idle, int | float) else DEFAULT_IDLE_UTILIZATION_PCT)
    jobs = queries.recorded_jobs(reader) or dict(config.cost.jobs)
    readings = queries.meter_readings(reader, start, end)
    recorded_price = HostPrice.from_dict(price)
    # Each tick at the price charged then (a daemon started again at another price, or on a
    # resized instance, recorded its own), else at the price the store last recorded.
    prices = PriceHistory.from_readings(readings, recorded_price)
    starts = run_starts(readings)  # nothing is charged between two runs, as live
    then = as_then(host, gpus, readings, prices, end)  # the host and GPUs at the window's end
    # A window across a restart onto other GPUs: a row per GPU and model, each over its part
    gpus[:] = split_by_model(reader, gpus, readings, start, end, rolled)
    if then is not None:
        recorded_price, price = then, host["price"]
    # The window's raw ticks, read and priced once for the timeline, the cost pass and the
    # energy (an hour or less; beyond, the timeline reads the rollups and the cost pass its
    # own timeline.COST_SAMPLES), bounded in process rows (timeline.raw_sample_count).
    raw = (RawWindow.read(reader, start, end, raw_sample_count(len(processes)), prices,
                          thresholds) if round(end - start, 3) <= TIMELINE_RAW_MAX_SPAN_S
           else None)
    recorded_spend = (recorded_ledger(reader, start, end, jobs)
                      if rolled and (end - start > SAMPLED_SPEND_MAX_S
                                     or not _raw_covers(reader, start, interval)) else None)
    # The ticks charged after the spend's last hand-over (a snapshot or a live store read
    # between two rounds) are in no hour row yet: charged here from their ticks, so the
    # recorded spend reaches the window's end (probe 84's snapshot: $0.455 over 50 s of a 59 s
    # window whose ticks the ledger charged $0.537).
    spend_to = _add_tail(reader, recorded_spend, start, end, prices, thresholds, jobs,
                         interval)
    # The ticks the cost pass and the energy split read: the raw window, else an even spread.
    sampled = raw or RawWindow.read(reader, start, end,
                                    cost_sample_count(end - start, len(processes)),
                                    prices, thresholds)
    # A target's dollars between two instants as the ledger charged them (the unit costs and
    # the cost per request: what it spent between the first and last reading of its counter)
    cost_between = recorded_cost_between(reader, jobs, prices=prices, thresholds=thresholds,
                                         interval=interval)
    window_cost = (_recorded_cost(recorded_spend, price, processes, readings, start, end,
                                  cost_between) if recorded_spend else None)
    # (the ticks the spend replayed, its recording gaps' ends and the tick before the window:
    # the energy counts the same seconds; beyond 6 h, read from the hour spend, the energy
    # counts its even spread alone)
    edged: tuple[RawWindow, frozenset[int], float | None] | None = None
    if window_cost is None:
        edged = _with_run_edges(reader, sampled, start, end, starts, prices, thresholds)
        window_cost = _window_cost(*edged, start, end, price, processes, interval, jobs,
                                   readings, cost_between)
    # Each kind as it was at the window's end (the store's kind history), else as the daemon
    # last classified it (a store from before the history: meta "kinds").
    kinds_then = queries.process_kinds(reader, end)
    kinds_last = queries.process_kinds(reader)
    labeler = JobLabeler(jobs)
    for proc in processes:
        key = (proc["pid"], proc["start_time"])
        owner = proc.get("owner")  # its job as the daemon's ledger labelled it live ([cost].jobs)
        proc["job"] = labeler.label(proc.get("command") or "",
                                    owner if isinstance(owner, dict) else None)
        recorded = kinds_then.get(key, kinds_last.get(key))
        proc.update(_kind_json(recorded))
        # its inference audit (daemon.analysis.inference_audit) as recorded with its kind, the
        # savings priced at this window's burn
        proc["inference"] = with_savings(recorded_audit(
            recorded.get("inference") if isinstance(recorded, dict) else None),
            proc.get("burn_per_hour"))
        proc["phases"] = _phases_json(balances.get(key))
        status = statuses.get(key)
        proc["stack_status"] = status["status"] if status else None
        proc["stack_error"] = status["error"] if status else None
    first = reader.query("SELECT min(ts) AS ts FROM ticks WHERE ts >= ? AND ts <= ?",
                         (round(start * 1000), round(end * 1000)))[0]["ts"]
    window = dict(summary["window"], first_sample_at=first / 1000 if first else None,
                  source="rollups" if rolled else "raw")
    recorded_range = queries.recorded_range(reader)
    window["recorded"] = (None if recorded_range is None else
                          {"first": recorded_range[0], "last": recorded_range[1]})
    window["store"] = reader.path
    host["recording"] = reader.recording
    catalog = price_host.load_catalog(config)
    host["price_warning"] = price_host.warning_json(
        None if recorded_price is None else price_host.price_warning(recorded_price, catalog,
                                                                     now=end))
    document = {
        "version": REPORT_VERSION,
        "host": host,
        "window": window,
        "burn": window_cost["burn"],
        "gpus": gpus,
        "processes": processes,
        "spend": window_cost["spend"],
        # an open event's cost to the range's end, or to the last tick where the recording
        # stopped before it (a stopped store's report ends now)
        "events": costed_to(queries.events(reader, start, end), end if recorded_range is None
                            else min(end, recorded_range[1])),
        **_recommendations_review(_with_resolutions(reader, _as_of(
            reader, end - max(since_s, recommendations_since_s or 0.0), end), end), price,
            gpus),
    }
    # The window's time in the store's range that no daemon recorded (between two runs):
    # charged nothing and not unaccounted, so said on its own (probe 155 M3)
    document["spend"]["not_recorded_seconds"] = not_recorded_s(reader, start, end, starts,
                                                               recorded_range)
    # GPUs the price counts that NVML did not list: charged in the burn (idle, wasted)
    document["burn"].update(unseen_json(HostPrice.from_dict(price),
                                        len({gpu["index"] for gpu in gpus})))
    # (from the window's first tick: a young store's window starts before anything was charged)
    document["burn"]["price_changes"] = [
        {"since": since, **charged.as_dict()}
        for since, charged in prices.changes_within(first / 1000 if first else start, end)]
    per_kwh = _recorded_per_kwh(price) or config.instance.electricity_per_kwh
    unpriced = PriceHistory.fixed(None)  # the energy reads power, not dollars
    document["energy"] = (_rollup_energy(gpus, per_kwh, interval, end - start) if rolled else
                          _window_energy(raw or RawWindow.read(
                              reader, start, end, raw_sample_count(len(processes)), unpriced,
                              None), gpus, per_kwh, interval, starts))
    for gpu in gpus:  # null without an electricity price: a contract's key is never left out
        gpu.setdefault("energy_per_hour", None)
    report_energy.section(document, edged[0].samples if edged else sampled.samples, start, end,
                          sampled_gap_s(interval, end - start, len(sampled.samples)),
                          jobs, config, rollup_interval=interval if rolled else None,
                          run_starts=starts, gap_ends=edged[1] if edged else frozenset(),
                          before=edged[2] if edged else None)
    document["timeline"] = build_timeline(reader, start, end, prices, thresholds, interval,
                                          raw)
    latency_report.section(document, readings, start, end, jobs,  # needs processes, timeline
                           cost_between)
    review = document.setdefault("review", {})
    current = recorded_spend
    if current is None:  # (the window's spend above was its ticks' replay)
        current = recorded_ledger(reader, start, end, jobs)
        spend_to = _add_tail(reader, current, start, end, prices, thresholds, jobs, interval)
    review.update(team_review.review(
        reader, start, end, by=by, jobs=jobs, kinds={**kinds_last, **kinds_then},
        energy=document["energy"],
        recommendations=document["recommendations"],
        current=current, spend_to=spend_to, cost_between=cost_between))
    review["carbon"] = report_energy.review_entry(document["carbon"])
    # the time recorded: the seconds the spend charged (ticks x the store's last interval read
    # 5 times too much of a run at 0.2 s ticks beside one at 1 s); else the ticks' share
    charged_s = (document.get("spend") or {}).get("seconds")
    covered_s = min(since_s, float(charged_s) if isinstance(charged_s, int | float)
                    and charged_s > 0 else float(window.get("ticks") or 0) * interval)
    review["managed"] = (None if recorded_price is None else price_host.managed_review(
        config, recorded_price, catalog, HOURS_PER_MONTH * covered_s / since_s if since_s > 0
        else HOURS_PER_MONTH))
    return document


def _with_run_edges(reader: StoreReader, raw: RawWindow, start: float, end: float,
                    starts: tuple[float, ...], prices: PriceHistory,
                    thresholds: IdleThresholds
                    ) -> tuple[RawWindow, frozenset[int], float | None]:
    """`raw` with the window's first and last ticks and each daemon start's edges in it
    (range_ticks.edge_ticks: the ticks the snapshot page and replay add too) where the read
    skipped them. A sampled read charged nothing before the first tick it picked, after its
    last, nor from the last it picked before a restart to the first after it (the ledger
    charges nothing across a start): probe 84's a.db, every 3rd of 661 ticks, read $5.972
    for the $5.999 its 659 s cost. And the two ticks of each recording gap inside a run
    (range_ticks.recording_gaps, longer than the ledger's cap): returned with the ticks that
    end one (ms), which the replay caps as the ledger did (CostLedger gap_ends), where the
    sampled read's cap, widened by its step, charged a stall of up to 3 steps whole. And the
    last tick at or before the window's start (None: none), from which its first tick after
    the start is charged, as the ledger charged it (a gap to it as capped, nothing across a
    daemon start)."""
    have = {round(sample.ts * 1000) for sample in raw.samples}
    before = tick_before(reader, start)
    # (the gaps from the tick before the window: its first tick's interval may be one)
    gaps = recording_gaps(reader, start if before is None else before, end)
    ends = frozenset(ts for _, ts in gaps)
    edges = edge_ticks(reader, start, end, starts, gaps)
    missing = sorted(edges - have)
    if not missing:
        return raw, ends, before
    picked = list(zip(raw.samples, raw.costs, strict=True))
    for ts in missing:
        edge = RawWindow.read(reader, ts / 1000, ts / 1000, 1, prices, thresholds)
        picked += zip(edge.samples, edge.costs, strict=True)
    picked.sort(key=lambda pair: pair[0].ts)
    return (RawWindow([sample for sample, _ in picked], [cost for _, cost in picked]),
            ends, before)


def _add_tail(reader: StoreReader, found: tuple[CostLedger, Any] | None, start: float,
              end: float, prices: PriceHistory, thresholds: IdleThresholds,
              jobs: dict[str, str] | None, interval: float) -> float | None:
    """Charge to `found` (the spend recorded over [start, end]) the window's ticks after the
    store's spend_through, as the daemon's ledger charges them (recorded_spend.unrecorded, as
    the next daemon start writes them to the store); returns where the spend then reaches: the
    last tick charged (None: where the store says, nothing added). Not the window's end: a
    stopped store reviewed to 7 minutes after its last tick read its 3 minutes of spend per day
    over 10 (probe 157 M2)."""
    through = queries.spend_through(reader)
    if found is None or through is None or through >= end:
        return None
    tail = unrecorded(reader, end, jobs, start=start, prices=prices, thresholds=thresholds,
                      interval=interval)
    if tail is None:  # no tick there, or no price to charge them with
        return None
    tail.add_to(found[0])
    return max(through, tail.through)


def _not_recorded_lines(report: dict[str, Any]) -> list[str]:
    """'not recorded: 35 s of the 103 s (no daemon running: ...)' where the window's time
    between two runs is material (a minute, or 1 % of the window's part of the store's range);
    [] otherwise."""
    window = report["window"]
    recorded = window.get("recorded") or {}
    missed = (report.get("spend") or {}).get("not_recorded_seconds")
    if not isinstance(missed, int | float) or missed < 1 or not recorded:
        return []
    span = min(window["until"], recorded["last"]) - max(window["since"], recorded["first"])
    if span <= 0 or (missed < 60 and missed < 0.01 * span):
        return []
    return [f"not recorded: {clock.duration(missed)} of the {clock.duration(span)} the store "
            "holds in this window (no daemon running, between two runs: charged nothing)"]


def _price_then(entry: dict[str, Any]) -> str:
    """One price of a window's price changes: "from 2026-12-04 22:17:51 $55.0600/h (aws
    p5.48xlarge, 8 GPUs)"; the first from the window's first tick."""
    what = " ".join(one_line(str(entry[k]))[:40] for k in ("provider", "instance_type")
                    if entry.get(k))
    gpus = entry.get("gpu_count")
    parts = [p for p in (what, plural(gpus, "GPU") if isinstance(gpus, int) else "") if p]
    return (f"from {clock.local_time(entry['since'])} ${entry['per_hour']:.4f}/h"
            + (f" ({', '.join(parts)})" if parts else ""))


def _recorded_per_kwh(price: dict[str, Any] | None) -> float:
    """The $/kWh the daemon ran with, where its recorded price carries it."""
    value = (price or {}).get("electricity_per_kwh")
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def _window_energy(raw: RawWindow, gpus: list[dict[str, Any]], per_kwh: float,
                   interval: float, starts: tuple[float, ...]) -> dict[str, Any] | None:
    """The GPUs' measured power priced at `per_kwh` over the window: mean $/h per GPU and for
    the host, and the energy cost of the window (gaps longer than the ledger's, and those
    across a daemon start, count nothing). None when no electricity price is set. Adds
    `energy_per_hour` to each GPU entry."""
    if per_kwh <= 0:
        return None
    samples = raw.samples
    max_gap = recording_gap_s(interval)
    rates: dict[int, list[float]] = {}
    host_rates, watts, cost = [], [], 0.0
    for i, sample in enumerate(samples):
        by_gpu, total = gpus_energy_per_hour({g.index: g.power_watts for g in sample.gpus},
                                             per_kwh)
        for index, rate in by_gpu.items():
            rates.setdefault(index, []).append(rate)
        host_rates.append(total)
        watts.append(sum(g.power_watts or 0.0 for g in sample.gpus))
        if i + 1 < len(samples):
            cost += total * tick_seconds(sample.ts, samples[i + 1].ts, max_gap, starts) / 3600
    by_gpu_mean = {index: sum(r) / len(r) for index, r in rates.items()}
    for gpu in gpus:
        gpu["energy_per_hour"] = by_gpu_mean.get(gpu["index"])
    return {"electricity_per_kwh": per_kwh,
            "energy_per_hour": sum(host_rates) / len(host_rates) if host_rates else None,
            "watts": sum(watts) / len(watts) if watts else None,
            "cost": round(cost, 6),
            "by_gpu": {str(index): rate for index, rate in sorted(by_gpu_mean.items())}}


def _from_rollups(reader: StoreReader, start: float, end: float, interval: float) -> bool:
    """Whether the window is read from the rollups: longer than RAW_MAX_SPAN_S, or reaching
    back before the raw samples kept (older than [store].raw_retention) where rollups are."""
    return end - start > RAW_MAX_SPAN_S or not _raw_covers(reader, start, interval)


def _raw_covers(reader: StoreReader, start: float, interval: float) -> bool:
    """False when the window starts before the raw samples kept while rollups reach further
    back (older than [store].raw_retention); True otherwise, an empty or young store too."""
    first_raw = reader.query("SELECT min(ts) AS ts FROM ticks")[0]["ts"]
    recorded = queries.recorded_range(reader)
    slack = 3 * interval + 60
    # (rollups from over a minute before the first raw tick say retention removed ticks; then
    # a window from more than a tick before it is not its raw ticks alone: 30 s before it, its
    # spend left those 30 s out, and its review did not)
    return not (first_raw is not None and recorded is not None
                and first_raw / 1000 > start + interval
                and recorded[0] < first_raw / 1000 - slack)


def _rollup_energy(gpus: list[dict[str, Any]], per_kwh: float, interval: float,
                   span: float) -> dict[str, Any] | None:
    """The energy of the window from the GPUs' mean power in the rollups (as _window_energy)."""
    if per_kwh <= 0:
        return None
    by_gpu, cost, watts = {}, 0.0, 0.0
    for gpu in gpus:
        power = gpu.get("power_watts")
        if not isinstance(power, int | float):
            gpu["energy_per_hour"] = None
            continue
        rate = gpu["energy_per_hour"] = power / 1000 * per_kwh
        by_gpu[str(gpu["index"])] = rate
        watts += power
        cost += rate * min(span, float(gpu.get("samples") or 0) * interval) / 3600
    return {"electricity_per_kwh": per_kwh,
            "energy_per_hour": sum(by_gpu.values()) if by_gpu else None,
            "watts": watts if by_gpu else None, "cost": round(cost, 6), "by_gpu": by_gpu}


def _recorded_cost(found: tuple[CostLedger, Any], price: dict[str, Any] | None,
                   processes: list[dict[str, Any]], readings: team_review.Readings,
                   start: float, end: float,
                   cost_between: CostBetween) -> dict[str, Any] | None:
    """Burn and spend over the window from the hour spend the daemon recorded (what its live
    ledger charged, `found`: recorded_spend.recorded_ledger); None without a price (the caller
    recomputes instead)."""
    host_price = HostPrice.from_dict(price)
    if host_price is None:
        return None
    ledger, _ = found
    hours = max(ledger.seconds, 1e-9) / 3600
    for entry in processes:
        key = (entry["pid"], entry["start_time"])
        cost = ledger.by_process.get(key)
        entry["cost"] = cost
        # its dollars over the seconds it was charged (the hour rows keep them), as the
        # replay of a shorter window weighs its ticks; a row without them: the time it was seen
        charged = ledger.process_seconds.get(key) or 0.0
        seen = max(1e-9, (entry["last_seen"] - entry["first_seen"]) / 3600)
        entry["burn_per_hour"] = (None if cost is None else cost / (charged / 3600)
                                  if charged > 0 else cost / min(seen, hours))
    ledger.set_storage(team_review.storage_items(readings, end))
    spend = ledger.as_dict()
    spend.pop("by_process", None)
    spend["unit_costs"] = unit_costs(readings, start, end, cost_between)
    # (the burn is the GPUs' and the host's, as a tick's: the storage is spend, not burn)
    return {"burn": {"total_per_hour": (ledger.total - ledger.storage) / hours,
                     "wasted_per_hour": ledger.wasted / hours,
                     "idle_per_hour": ledger.idle / hours,
                     "price_source": host_price.source, "price_per_hour": host_price.per_hour,
                     "price_per_gpu": host_price.per_gpu},
            "spend": spend}


def _phases_json(balance: dict[str, Any] | None) -> dict[str, Any]:
    if not balance:
        return {}
    return {phase: {"seconds": round(part["seconds"], 1), "share": round(part["share"], 4),
                    "gpu_idle_seconds": round(part["gpu_idle_seconds"], 1),
                    "top_stacks": part["top_stacks"],
                    "confidence": part.get("confidence", HIGH_CONFIDENCE)}
            for phase, part in balance.items()}


def _window_cost(raw: RawWindow, gap_ends: frozenset[int], before: float | None, start: float,
                 end: float, price: dict[str, Any] | None,
                 processes: list[dict[str, Any]], interval: float,
                 jobs: dict[str, str] | None = None,
                 readings: team_review.Readings | None = None,
                 cost_between: CostBetween | None = None) -> dict[str, Any]:
    """Burn and spend over the window from the recorded samples the report read (`raw`, each
    priced with the host's price, with the ticks of each recording gap: `gap_ends`, the ticks
    that end one) and the host's price. Each tick after the window's start is charged the
    interval before it, the first from the last tick at or before the start (`before`), as the
    review places a cut hour's spend (queries._recorded_shares): two adjacent windows add up
    to their union, and a window's spend is its review's (probe 153 M2: the first tick's
    interval was left out, a 20 s window of 1 s ticks charged 19 s).

    Recomputed with the same cost model the daemon runs live (daemon.analysis.cost.burn), sample by
    sample, so the report and the live view agree.
    """
    host_price = HostPrice.from_dict(price)
    # No tick (or no price): the same keys as a window with ticks, its spend 0 (nothing was
    # charged), null without a price to charge with (a contract's key is never left out).
    spent = CostLedger(jobs).as_dict(by_process=False)
    if host_price is None:
        spent.update([(key, None) for key, value in spent.items()
                      if isinstance(value, int | float)])
    empty: dict[str, Any] = {"burn": {
        "total_per_hour": None, "wasted_per_hour": None, "idle_per_hour": None,
        "price_source": None, "price_per_hour": host_price and host_price.per_hour,
        "price_per_gpu": host_price and host_price.per_gpu}, "spend": spent}
    if host_price is None:
        return empty
    # The ticks read (every tick of a short window of a few processes; fewer, evenly spread,
    # as the window or the host grows), each charged for its share of the window.
    samples = raw.samples
    if not samples or raw.costs[0] is None:
        empty["burn"]["price_source"] = host_price.source
        return empty
    # The daemon's ledger, replayed: its job labels, the storage walk and the unit-cost
    # counters as they were read (what each target had cost at each reading).
    # Sampled ticks are further apart than recorded ones by the sampling step, so the limit
    # grows with it; a recording gap inside a run (`gap_ends`, both its ticks read) is capped
    # as the ledger capped it, and nothing is charged across a daemon start.
    readings = readings or {}
    ledger = CostLedger(jobs, max_gap_s=sampled_gap_s(interval, end - start, len(samples)),
                        run_starts=run_starts(readings), gap_ends=gap_ends)
    # (readings hold the last daemon start before the window: none charged across it)
    ledger.last_ts = before
    # each counter's target's dollars at its readings' times, as the replay charged them: a
    # target's dollars between two readings where the store recorded no hour spend
    targets = {m.target for m in unit_meters(readings).values()}
    pending = sorted(ts for (kind, _), found in readings.items() if kind == "unit"
                     for ts, _, _ in found)
    charged_at: dict[tuple[str, float], float] = {}
    # The burn: each tick's rates weighted by the seconds the ledger charged it (the window's
    # spend over its charged seconds, as the hour spend reads beyond 6 h), not a plain mean of
    # the ticks read: one run at 0.2 s ticks and one at 1 s weighed the first's seconds 5
    # times (probe 155 M1: $39.06/h over 10 min, $47.12/h over 7 h, for the same seconds).
    # The plain means stand in where no tick charged anything (a window of one tick).
    rates = BurnRates()
    for sample, current in zip(samples, raw.costs, strict=True):
        assert current is not None  # priced: the host has a price
        ledger.set_storage(team_review.storage_items(readings, sample.ts))
        rates.add(current, ledger.add(current))
        while pending and pending[0] <= sample.ts:
            at = pending.pop(0)
            charged_at.update(((target, at), ledger.cost_of(target)) for target in targets)
    for entry in processes:
        # Samples and summary come from the same store: the same (pid, start_time) keys.
        key = (entry["pid"], entry["start_time"])
        entry["burn_per_hour"] = rates.process(key)
        entry["cost"] = ledger.by_process.get(key)
    spend = ledger.as_dict()
    spend.pop("by_process", None)

    def replayed(target: str, since: float, until: float) -> float | None:
        a, b = charged_at.get((target, since)), charged_at.get((target, until))
        return None if a is None or b is None else b - a

    def between(target: str, since: float, until: float) -> float | None:
        found = cost_between(target, since, until) if cost_between else None
        return replayed(target, since, until) if found is None else found

    spend["unit_costs"] = unit_costs(readings, start, end, between)
    return {"burn": {**rates.host(), "price_source": host_price.source,
                     "price_per_hour": host_price.per_hour, "price_per_gpu": host_price.per_gpu},
            "spend": spend}


def _bytes(value: float | int | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{int(value)} B"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _num(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns in terminal cells (daemon.wire.cells: a user or workload of wide characters
    pushed the columns after it out of line when they were counted in code points)."""
    widths = [max(cells(h), *(cells(r[i]) for r in rows)) if rows else cells(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(pad(h, w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(pad(c, w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def fit(lines: list[str], width: int | None) -> list[str]:
    """Lines longer than `width` wrapped under their own indent plus 4 (None: as they are,
    for a pipe or a file, where nothing may be cut). The space a line breaks at is dropped,
    not carried to the next line, where it indented that line one space too far; the first
    line keeps its own indent (textwrap keeps a paragraph's leading whitespace)."""
    if width is None:
        return lines
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out += textwrap.wrap(line, width, subsequent_indent=indent[:max(width // 2, 1)],
                             break_on_hyphens=False) or [line[:width]]
    return out


def shown_command(command: str, width: int | None) -> str:
    """A command line in a terminal's column (`width`: the program first, cut with an
    ellipsis), or whole (None: piped or redirected, where no line is cut and a grep finds it;
    one line, its control bytes written out)."""
    return one_line(command) if width is None else short_command(one_line(command), width)


def render_text(report: dict[str, Any], width: int | None = None) -> str:
    """The report for a terminal `width` columns wide (lines wrap there), or for a pipe or
    a file (None: no line is cut or wrapped). Control bytes in what processes wrote (and in
    anything else a store holds) are shown as `\\x1b` (daemon.sources.safe_text), never sent."""
    return lines(_render_text(report, width))


def _render_text(report: dict[str, Any], width: int | None) -> str:
    host = report["host"]
    window = report["window"]
    out = []
    title = f"mlcost report: {one_line(str(host.get('hostname', '?')))}"
    if host.get("simulated"):
        title += f" (simulated host, scenario {host['simulated']!r})"
    out.append(title)
    instance = host.get("instance") or {}
    if instance.get("type"):
        said = {k: one_line(str(instance.get(k)))[:40]  # a store's text: one line, cut
                for k in ("provider", "type", "region", "lifecycle")}
        out.append(f"instance: {said['provider']} {said['type']} in {said['region']} "
                   f"({said['lifecycle']})")
    since = clock.local_time(window["since"])
    same_day = clock.local_time(window["since"])[:10] == clock.local_time(window["until"])[:10]
    until = clock.local_time(window["until"], date=not same_day)
    out.append(f"window: {since} to {until} ({clock.local_zone(window['until'])}), "
               f"{window['ticks']} samples")
    first = window.get("first_sample_at")
    if first and first - window["since"] > 3 * float(host.get("interval_s") or 1.0) + 60:
        out.append(f"  (samples from {clock.local_time(first)}"
                   " on: nothing recorded before, or older than [store].raw_retention)")
    out += _not_recorded_lines(report)
    if host.get("nvml_status") not in (None, "ok"):
        out.append(f"NVML: {host['nvml_status']}")
    if not window["ticks"]:
        out.append("")
        out += _no_samples(window, host.get("recording"))
        return "\n".join(fit(out, width)) + "\n"
    burn_now = report.get("burn") or {}
    if burn_now.get("total_per_hour") is not None:
        out.append(f"burn: ${burn_now['total_per_hour']:.2f}/h  (wasted "
                   f"${burn_now['wasted_per_hour']:.2f}/h, no process "
                   f"${burn_now['idle_per_hour']:.2f}/h); price ${burn_now['price_per_hour']:.4f}/h,"
                   f" ${burn_now['price_per_gpu']:.4f}/h per GPU ({burn_now['price_source']})")
        if burn_now.get("warning"):
            out.append(f"  {one_line(str(burn_now['warning']))}")
    changed = burn_now.get("price_changes") or []
    if changed:
        out.append("the price changed in this window (each tick is charged at its own): "
                   + ", ".join(_price_then(entry) for entry in changed))
    warning = host.get("price_warning")
    if warning:
        out += _warning_lines(warning)
    energy = report.get("energy")
    if energy and energy.get("energy_per_hour") is not None:
        out.append(f"energy: ${energy['energy_per_hour']:.2f}/h beside the burn "
                   f"({energy['watts'] / 1000:.2f} kW measured at "
                   f"${energy['electricity_per_kwh']:g}/kWh), "
                   f"${energy['cost']:.{2 if energy['cost'] >= 1 else 4}f} in the window")
    out += report_energy.text_lines(report)
    spend = report.get("spend") or {}
    if spend.get("by_day"):
        days = ", ".join(f"{day} ${value:.2f}" for day, value in spend["by_day"].items())
        out.append(f"spend in the window by UTC day: {days}")
    if spend.get("by_owner"):
        top = sorted(spend["by_owner"].items(), key=lambda item: -item[1])[:8]
        out += textwrap.wrap("spend by owner: " + ", ".join(
            f"{name} ${value:.2f}" for name, value in top), WRAP_WIDTH, subsequent_indent="  ")
    out.append("")
    out.append("GPUs")
    rows = []
    for gpu in report["gpus"]:
        memory = f"{_bytes(gpu['memory_used_bytes'])} / {_bytes(gpu['memory_total_bytes'])}"
        status = gpu.get("status") or "ok"
        peak = gpu.get("memory_peak_bytes")
        row = [str(gpu["index"]), gpu["name"], _pct(gpu["utilization"]),
               _pct(gpu.get("sm_activity")), memory,
               "-" if peak is None else _bytes(peak), _num(gpu["power_watts"], " W"),
               status if status == "ok" else f"{status}"]
        if energy:
            row.insert(7, money(gpu.get("energy_per_hour")))
        rows.append(row)
    header = ["GPU", "model", "util", "SM", "memory", "peak", "power", "status"]
    if energy:
        header.insert(7, "energy $/h")
    out += ["  " + line for line in _table(header, rows)]
    split = sorted({gpu["since"] for gpu in report["gpus"]
                    if gpu.get("since") is not None and gpu["since"] > window["since"]})
    if split:
        out.append("  (the GPUs changed in this window, at "
                   + ", ".join(clock.local_time(at) for at in split)
                   + ": a row per GPU and model, each over its part of the window)")
    out.append("")
    out.append("Processes (GPU processes and their workers)")
    rows = []
    for proc in report["processes"]:
        command = shown_command(proc["command"], 48 if width else None)
        gpus = ",".join(str(g) for g in proc["gpus"]) or "-"
        rows.append([str(proc["pid"]), one_line(proc["user"]), gpus, _bytes(proc["gpu_memory_bytes"]),
                     _pct(proc["sm_share"]) if proc["gpus"] else "-",
                     _pct(proc["cpu_percent"]), _bytes(proc["rss_bytes"]),
                     _bytes(proc["read_bytes"]), _num(proc["io_wait_seconds"], " s", 1),
                     money(proc.get("burn_per_hour")), money(proc.get("cost")),
                     one_line(proc.get("workload") or "-"), command])
    if rows:
        out += ["  " + line for line in _table(
            ["PID", "user", "GPUs", "GPU mem", "SM", "CPU", "RSS", "read", "I/O wait",
             "$/h", "spent", "workload", "command"], rows)]
    else:
        out.append("  no process used a GPU in this window")
    out += _render_kinds(report["processes"])
    out += _render_inference(report["processes"])
    out += _render_phases(report["processes"], 40 if width else None)
    out += report_latency.render_text(report)
    out += _render_events(report.get("events") or [], host.get("recording_stopped_at"),
                          window["until"], snapshot_until=host.get("snapshot_until"))
    out += _render_managed((report.get("review") or {}).get("managed"))
    out += render_review(report.get("review") or {}, width)
    out += _render_recommendations(report.get("recommendations") or [], report.get("savings"))
    return "\n".join(fit(out, width)) + "\n"


# The live summary's lists (`mlcostd run --watch`): a screenful every 5 s, not a report.
WATCH_PROCESSES = 8
WATCH_EVENTS = 3
WATCH_RECOMMENDATIONS = 3


def render_watch(report: dict[str, Any], width: int | None = None) -> str:
    """`mlcostd run --watch`'s live summary of the report's (short) window: the burn, each
    GPU, the processes holding one, the open events and the best recommendations, a line
    each; what it leaves out it counts and names the command that lists it all."""
    window = report["window"]
    if not window["ticks"]:
        return "no sample yet in the last 10 s\n"
    span = window["until"] - window["since"]
    out = []
    burn = report.get("burn") or {}
    if burn.get("total_per_hour") is not None:
        out.append(f"last {span:.0f} s: burn ${burn['total_per_hour']:.2f}/h (wasted "
                   f"${burn['wasted_per_hour']:.2f}/h, no process "
                   f"${burn['idle_per_hour']:.2f}/h), {window['ticks']} samples")
        if burn.get("warning"):
            out.append(f"  {one_line(str(burn['warning']))}")
    else:
        out.append(f"last {span:.0f} s: {window['ticks']} samples (no price)")
    rows = [[str(gpu["index"]), one_line(str(gpu["name"])), _pct(gpu["utilization"]),
             f"{_bytes(gpu['memory_used_bytes'])} / {_bytes(gpu['memory_total_bytes'])}",
             _num(gpu["power_watts"], " W"), gpu.get("status") or "ok"]
            for gpu in report["gpus"]]
    out += ["  " + line for line in _table(["GPU", "model", "util", "memory", "power",
                                            "status"], rows)]
    holders = sorted((p for p in report["processes"] if p.get("gpus")),
                     key=lambda p: -(p.get("burn_per_hour") or 0.0))
    rows = [[str(p["pid"]), one_line(p["user"]), ",".join(str(g) for g in p["gpus"]),
             _bytes(p["gpu_memory_bytes"]), _pct(p["sm_share"]), money(p.get("burn_per_hour")),
             shown_command(p["command"], 48 if width else None)]
            for p in holders[:WATCH_PROCESSES]]
    out.append("")
    if rows:
        out += ["  " + line for line in _table(["PID", "user", "GPUs", "GPU mem", "SM", "$/h",
                                                "command"], rows)]
    else:
        out.append("  no process holds a GPU")
    if len(holders) > WATCH_PROCESSES:
        out.append(f"  … and {len(holders) - WATCH_PROCESSES} more holding a GPU")
    events = sorted((e for e in report.get("events") or []
                     if e["kind"] != "action" and e.get("ended_at") is None),
                    key=lambda e: -(e.get("cost_so_far") or 0.0))
    if events:
        out.append("")
        out.append(f"open events: {len(events)}")
        out += [f"  {e['kind']} {one_line(str(e['target']))}: since "
                f"{clock.local_time(e['started_at'], date=False)}"
                + ("" if e.get("cost_so_far") is None else
                   f", {money(e['cost_so_far'])} so far") for e in events[:WATCH_EVENTS]]
    recommendations = report.get("recommendations") or []
    out.append("")
    savings = (report.get("savings") or {}).get("potential_per_month")
    out.append(f"recommendations: {len(recommendations)}"
               + (f", up to ${savings:,.0f}/month combined" if savings else ""))
    for rec in recommendations[:WATCH_RECOMMENDATIONS]:  # a line each in a terminal
        alone = rec.get("combined_savings_per_month") or rec.get("savings_per_month")
        head = f"  [{f'${alone:,.0f}/month' if alone else 'no $ figure'}" + (
            ", resolved] " if rec.get("status") == "resolved" else "] ")
        said = one_line(str(rec.get("headline") or rec.get("summary") or rec.get("id")))
        out.append(head + (crop(said, max(width - len(head), 20)) if width else said))
    if len(recommendations) > WATCH_RECOMMENDATIONS:
        out.append(f"  … and {len(recommendations) - WATCH_RECOMMENDATIONS} more")
    out.append("")
    out.append("everything (phases, review, inference audit, all events): mlcostd report"
               + (f" --db {one_line(str(window['store']))}" if window.get("store") else ""))
    return "\n".join(fit(out, width)) + "\n"


def _no_samples(window: dict[str, Any], recording: bool | None) -> list[str]:
    """Why the window is empty, with the range the file holds where it holds any."""
    recorded = window.get("recorded")
    store = one_line(str(window.get("store") or "the store"))
    if not recorded:
        return [f"No samples in {store} at all. Is mlcostd running? Start it with `mlcostd "
                "run`, or pass the --db it records into (a simulated host's: its start says "
                "where)."]
    held = queries.held_range(store, (recorded["first"], recorded["last"]))  # as snapshots say
    if recording is False:
        return [f"No samples in this window: {held} (no daemon records into it). Drop --since "
                "and --until to report all of it, or give a window inside that range."]
    return [f"No samples in this window: {held}. Is mlcostd running? Try a longer --since, "
            "or an --until inside that range."]


def _packed(head: str, items: list[str]) -> list[str]:
    """`head` then the items, comma-separated, wrapped at WRAP_WIDTH between items only."""
    out, line = [], head
    for i, item in enumerate(items):
        piece = item + ("," if i + 1 < len(items) else "")
        if len(line) + 1 + len(piece) > WRAP_WIDTH and line.strip() != head.strip():
            out.append(line)
            line = "    " + piece
        else:
            line += (" " if line else "") + piece
    return out + [line]


def _trend_text(pct: float | None) -> str:
    return "" if pct is None else f" ({pct:+.1f}% on the period before)"


def render_review(review: dict[str, Any], width: int | None = None) -> list[str]:
    """The review's lines (daemon.commands.review): spend and its trend, splits, unit costs,
    storage, waste, energy, and what became of the recommendations. For a terminal (`width`
    given) names and summaries are cut with an ellipsis; for a pipe or a file (None) they are
    whole, as the rest of the report."""

    def cut(text: object, cells: int) -> str:
        return one_line(str(text)) if width is None else crop(one_line(str(text)), cells)

    spend = review.get("spend")
    if not spend or spend.get("total") is None:  # (no recorded spend: its keys are null)
        return []
    span = clock.duration(review["until"] - review["since"])
    out = ["", f"Review: {clock.local_time(review['since'], seconds=False)} to "
               f"{clock.local_time(review['until'], seconds=False)} "
               f"({clock.local_zone(review['until'])}; {span}), against the {span} before"]
    previous = spend.get("previous_total")
    untrended = (review.get("previous") or {}).get("trend")
    basis = spend.get("per_day_basis")
    per_day = spend["per_day"]
    out.append(f"  spend ${spend['total']:,.2f} ("
               + ("" if per_day is None else f"${per_day:,.2f}/day")
               + (f"{' ' if per_day is not None else ''}{one_line(str(basis))}" if basis
                  else "") + ")"
               + ("" if previous is None else f"; before: ${previous:,.2f}")
               + _trend_text(spend.get("trend_pct"))
               + (f" ({one_line(str(untrended))})" if untrended else ""))
    out += _packed("  by month:", [f"{month} ${value:,.2f}"
                                    for month, value in spend["by_month"].items()])
    out += _packed("  by day (UTC):", [f"{day[5:]} ${value:,.2f}"
                                       for day, value in spend["by_day"].items()])
    waste = review.get("waste") or {}
    share = waste.get("wasted_share")
    out.append(f"  waste: ${waste.get('wasted', 0):,.2f} of GPU time paid and unused"
               + ("" if share is None else f" ({share:.0%} of spend)")
               + f", ${waste.get('idle', 0):,.2f} with no process"
               + _trend_text(waste.get("trend_pct")))
    storage = review.get("storage") or {}
    if storage.get("cost"):
        out.append(f"  storage: ${storage['cost']:,.2f}")
    energy = review.get("energy") or {}
    if energy.get("cost") is not None:
        out.append(f"  energy: ${energy['cost']:,.2f} at ${energy['electricity_per_kwh']:g}/kWh")
    out += report_energy.review_line(review, width)
    for key, rows in (review.get("by") or {}).items():
        out += _packed(f"  by {key}:", [
            f"{cut(r['name'], 60)} ${r['cost']:,.2f}"
            + ("" if r.get("trend_pct") is None else f" ({r['trend_pct']:+.0f}%)")
            for r in rows[:10]])
    for unit in review.get("unit_costs") or []:
        cost = unit.get("unit_cost")
        per = f"{unit['per']:g}".replace("1e+06", "1M").replace("1000", "1k")
        out.append(f"  unit cost of {cut(unit['target'], 60)}: "
                   + ("no units counted" if cost is None else
                      f"${cost:,.4f} per {per} {cut(unit['unit'], 20)}")
                   + _trend_text(unit.get("trend_pct")))
    outcomes = review.get("recommendations") or {}
    out.append(f"  recommendations: {len(outcomes.get('acted') or [])} acted on, "
               f"{len(outcomes.get('snoozed') or [])} snoozed, "
               f"{len(outcomes.get('ignored') or [])} ignored, "
               f"{len(outcomes.get('new') or [])} new (raised in the last day)")
    for state in ("acted", "snoozed", "ignored", "new"):
        for rec in outcomes.get(state) or []:
            savings = rec.get("savings_per_month")
            # (as the Recommendations section says it: a budget's advice saves no $ figure)
            money = (f"${savings:,.0f}/month" if isinstance(savings, int | float) and savings > 0
                     else "no $ figure")
            extra = (f": {cut(rec.get('outcome'), 60)}" if state == "acted" else
                     f" until {clock.local_time(rec['snoozed_until'])}" if state == "snoozed"
                     else "")
            out.append(f"    {state}{extra} [{money}] "
                       f"{cut(rec.get('summary') or rec.get('id'), 90)}")
    return out


def _kind_json(kind: Any) -> dict[str, Any]:
    """A process's kind as recorded; the store is data: bounded, one line each."""
    kind = kind if isinstance(kind, dict) else {}
    confidence = kind.get("kind_confidence")
    evidence = kind.get("kind_evidence")
    return {"kind": one_line(kind["kind"])[:32] if isinstance(kind.get("kind"), str) else None,
            "kind_confidence": float(confidence) if isinstance(confidence, int | float) else None,
            "kind_evidence": [one_line(e)[:200] for e in (evidence or [])[:16]
                              if isinstance(e, str)] if isinstance(evidence, list) else [],
            "serves": kind.get("serves") is True}


def _render_inference(processes: list[dict[str, Any]]) -> list[str]:
    """The inference audit of each inference process: runtime, quantization, batching, advice."""
    audited = [p for p in processes if p.get("gpus") and isinstance(p.get("inference"), dict)]
    if not audited:
        return []
    out = ["", "Inference audit (runtime, quantization, batching; advice with its saving)"]
    for proc in audited:
        audit = proc["inference"]
        batching = audit.get("batching") or {}
        at_load = batching.get("sm_share_at_load")
        readings, working = batching.get("sm_readings"), batching.get("sm_readings_at_work")
        counted = (f"at work in {working} of {readings} readings"
                   if isinstance(working, int) and isinstance(readings, int) and working < readings
                   else f"{readings} readings")
        out.append(f"  {proc['pid']} {proc.get('kind') or '?'}: runtime {audit.get('runtime')} "
                   f"({'; '.join(audit.get('runtime_evidence') or [])}); quantization: "
                   + (", ".join(audit.get("quantization") or []) or "none seen")
                   + (f"; SM share at load {at_load:.1f}% ({counted})"
                      if isinstance(at_load, int | float) else
                      "; SM share at load not measured yet"))
        for advice in audit.get("advice") or []:
            saving = advice.get("saving_per_month")
            # 0 is what an advice whose saving is not estimated yet carries: not "$0.00"
            out.append(f"    - {advice.get('name')}: {advice.get('text')}"
                       + (f" (saves up to {money(saving)}/month)"
                          if isinstance(saving, int | float) and saving > 0
                          else " (saving not estimated)"))
            out.append(f"      how: {advice.get('saving_method')}; "
                       f"uncertainty: {advice.get('uncertainty')}")
    return out


def _render_kinds(processes: list[dict[str, Any]]) -> list[str]:
    out = ["", "Workload kinds (what each GPU process is, how sure, and why)"]
    shown = [p for p in processes if p.get("gpus") and p.get("kind")]
    for proc in shown:
        confidence = proc.get("kind_confidence")
        sure = f" ({confidence:.0%} sure)" if isinstance(confidence, int | float) else ""
        serves = "; serves: never offered SIGTERM" if proc.get("serves") else ""
        out.append(f"  {proc['pid']} {proc['kind']}{sure}{serves}: "
                   + "; ".join(proc.get("kind_evidence") or []))
    if not shown:
        out.append("  no kind recorded for this window's processes")
    return out


def _render_phases(processes: list[dict[str, Any]],
                   command_width: int | None = 40) -> list[str]:
    out = ["", "Where the time goes (phase balance; stacks sampled while a GPU waits)"]
    shown = False
    for proc in processes:
        phases = proc.get("phases") or {}
        if not phases:
            if proc.get("stack_status") not in (None, "ok"):
                out.append(f"  {proc['pid']}: no stacks: {proc['stack_error']}")
                shown = True
            continue
        shown = True
        parts = ", ".join(f"{phase_label(phase, part.get('confidence'))} {part['share']:.0%}"
                          for phase, part in phases.items())
        low = any(part.get("confidence") == LOW_CONFIDENCE for part in phases.values())
        out.append(f"  {proc['pid']} {shown_command(proc['command'], command_width)}: {parts}"
                   + (f" ({LOW_CONFIDENCE_MARK}: low confidence, from /proc, no stacks)"
                      if low else ""))
        for phase, part in phases.items():
            if phase == COMPUTE or not part["top_stacks"]:
                continue
            top = part["top_stacks"][0]
            where = f"{top['file']}:{top['line']}" if top.get("file") else "?"
            out.append(f"      {phase}: {where} {top.get('function') or ''} "
                       f"({plural(top['samples'], 'sample')})")
            if top.get("reason"):
                out.append(f"        why: {top['reason']}")
    if not shown:
        out.append("  no process waited on anything in this window")
    return out


# Events the text lists (the costliest; actions, the audit trail, always): a month's report
# would otherwise run to hundreds of lines. `--json` and the HTML page list them all.
EVENTS_SHOWN = 20


def _render_events(events: list[dict[str, Any]], stopped_at: float | None = None,
                   until: float | None = None, *,
                   snapshot_until: float | None = None) -> list[str]:
    # A low-utilization window is where stacks were sampled (a demo hour holds ~100): what it
    # found is in "Where the time goes"; listed here it would crowd out the events that cost.
    # (So is a middle-band stretch: a process at work whose stacks were sampled more slowly.)
    mids = sum(e["kind"] == MID_UTILIZATION for e in events)
    windows = sum(e["kind"] in SAMPLED for e in events) - mids
    idle = [e for e in events if e["kind"] not in SAMPLED]
    listed = " and ".join(
        [plural(windows, "low-utilization window")] * bool(windows)
        + [plural(mids, "middle-band stretch", "middle-band stretches")] * bool(mids))
    windows_line = ([f"  ({listed} not listed: where stacks were sampled, their findings are "
                     "under \"Where the time goes\"; `--json` lists them)"]
                    if windows or mids else [])
    if not idle:
        return ["", "Events", *windows_line] if windows_line else []
    # (the audit trail and the store's dropped ticks are always listed: they cost nothing)
    costly = sorted((e for e in idle if e["kind"] not in ("action", TICKS_DROPPED)),
                    key=lambda e: -(e.get("cost_so_far") or 0.0))
    left = costly[EVENTS_SHOWN:]
    left_out = {id(e) for e in left}  # by identity: one pass, however many events
    shown = [e for e in idle if id(e) not in left_out]
    end_day = clock.local_time(until if until is not None else clock.now())[:10]

    def when(ts: float) -> str:
        """Its time; with its date where that is not the window's last day."""
        text = clock.local_time(ts)
        return text[11:] if text[:10] == end_day else text

    out = ["", "Events"]
    for event in shown:
        start = when(event["started_at"])
        if event["kind"] == "action":  # the audit trail (daemon/api/audit.py)
            detail = event.get("detail") or {}
            what = "dry run of" if detail.get("dry_run") else "action"
            out.append(f"  {start} "
                       f"{detail.get('who', '?')}: {what} {detail.get('action', '?')} on "
                       f"{event['target']}: {detail.get('outcome', '?')}")
            continue
        if event["kind"] == TICKS_DROPPED:  # the store could not take them: a hole
            detail = event.get("detail") or {}
            count = detail.get("ticks") if isinstance(detail, dict) else None
            why = one_line(str(detail.get("why") or ""))[:160] if isinstance(detail, dict) else ""
            end = event["ended_at"] if event["ended_at"] is not None else event["started_at"]
            out.append(f"  {start} to {when(end)}: "
                       f"{plural(count, 'tick') if isinstance(count, int) else 'ticks'} taken "
                       "but not recorded (the store could not be written"
                       f"{': ' + why if why else ''}); the figures cover less time there")
            continue
        if event["ended_at"] is not None and ended_by_recording_stop(event):
            state = f"open when the recording stopped at {when(event['ended_at'])}"
        elif event["ended_at"] is not None:
            state = "ended"
        elif snapshot_until is not None:  # (the recorder may have gone on: the file ended)
            state = f"open at the end of this snapshot, {when(snapshot_until)}"
        elif stopped_at is not None:
            state = f"open when the recording stopped at {when(stopped_at)}"
        else:
            state = "ongoing"
        cost = money(event.get("cost_so_far"))
        out.append(f"  {event['kind']} {event['target']}: since {start} "
                   f"({state}), {cost} so far")
        if event.get("snapshot"):
            out.append(f"    snapshot: {event['snapshot']}")
    if left:
        spent = sum(e.get("cost_so_far") or 0.0 for e in left)
        out.append(f"  … and {len(left)} more ({money(spent)} so far; `--json` lists them all)")
    return out + windows_line


def _warning_lines(warning: dict[str, Any]) -> list[str]:
    """The price warning, wrapped, with its refresh command on a line of its own."""
    return _wrap_with_command(f"warning: {warning['message']}", "", "  ")


def _wrap_with_command(text: str, first: str, rest: str) -> list[str]:
    """`text` wrapped to WRAP_WIDTH; a trailing "; run `COMMAND`" goes whole on its own line,
    so it can be copied."""
    head, found, tail = text.rpartition("; run `")
    if not found or not tail.endswith("`"):
        head, tail = text, ""
    lines = textwrap.wrap(head, WRAP_WIDTH, initial_indent=first, subsequent_indent=rest,
                          break_on_hyphens=False)
    return lines + ([f"{rest}run: {tail[:-1]}"] if tail else [])


def _render_managed(managed: dict[str, Any] | None) -> list[str]:
    """The managed-platform price of this hardware against self-managed, or why it is missing."""
    if not managed:
        return []
    out = ["", "Managed vs self-managed"]
    if managed.get("error"):
        return out + _wrap_with_command(managed["error"], "  ", "    ")
    for text in (managed["summary"], f"managed: {managed['managed_source']}; self-managed: "
                                      f"{managed['self_managed_source']}"):
        out += textwrap.wrap(text, WRAP_WIDTH, initial_indent="  ", subsequent_indent="    ")
    return out


def _render_recommendations(recommendations: list[dict[str, Any]],
                            savings: dict[str, Any] | None = None) -> list[str]:
    out = ["", "Recommendations (savings are upper bounds; combined: each after the ones "
           "before it)"]
    if not recommendations:
        return out + ["  none in this window"]
    out += ["  " + line for line in potential_lines(savings)]
    for rec in recommendations:
        money = money_text(rec)
        out.append(f"  [{money}{_evidence_note(rec)}] {rec['summary']}")
    return out
