"""What the HTML report shows, read from a store (a snapshot, the daemon's database or a copy).

Everything here comes through the store's read path (StoreReader, daemon.store.queries) and the
cost model the daemon runs live (daemon.analysis.cost.burn, CostLedger), so the report, the
replay and the live view agree. The renderer (daemon.report_html.render) gets a `ReportData`
and nothing else: later work renders other recordings (a profile of one command) with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.analysis import latency_report, recommendations_at
from daemon.analysis.balance import LOW_UTILIZATION, SAMPLED, phase_balances
from daemon.analysis.busy import DEFAULT_IDLE_UTILIZATION_PCT, IdleThresholds
from daemon.analysis.cost import HostPrice, burn
from daemon.analysis.energy import recorded_grid, window_meter, window_summary
from daemon.analysis.gpu_models import split_by_model
from daemon.analysis.idle import costed_to
from daemon.analysis.ledger import BurnRates, CostLedger, JobLabeler, run_starts
from daemon.analysis.price_history import PriceHistory, as_then
from daemon.analysis.range_ticks import recording_gaps, tick_before, with_edges
from daemon.analysis.recorded_spend import recorded_cost_between
from daemon.analysis.timeline import cost_sample_count, sampled_gap_s
from daemon.sources.safe_text import one_line
from daemon.store import queries
from daemon.store.reader import StoreReader
from daemon.store.shape import check_shape
from daemon.store.snapshot import snapshot_facts
from daemon.wire import HIGH_CONFIDENCE, LOW_CONFIDENCE, process_key, short_command

LABEL_CHARS = 32  # a timeline row's name: enough for 'train.py' or a module's last parts
_LABELER = JobLabeler()  # the job label without configured jobs: script or module name
SERIES_POINTS = 240  # points per chart line: plenty for a page, small for the file
TOP_STACKS = 8

Point = tuple[float, float]


@dataclass
class ReportData:
    """The report's content, JSON-like values only."""

    title: str
    since: float
    until: float
    host: dict[str, Any]
    price: dict[str, Any] | None
    snapshot: dict[str, Any] | None  # the snapshot's own facts (trigger, version), if it is one
    # What made the page, in lines of text: a profile's verdict, gates and figures (the store
    # does not hold them), shown above the charts.
    summary: list[str] = field(default_factory=list)
    burn: dict[str, list[Point]] = field(default_factory=dict)  # series name -> points ($/h)
    gpu_utilization: dict[int, list[Point]] = field(default_factory=dict)
    gpu_memory: dict[int, list[Point]] = field(default_factory=dict)  # GiB
    gpus: list[dict[str, Any]] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)  # low-utilization windows
    stacks: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    # as they stood at the range's end, each with its combined_savings_per_month (the report's
    # document["recommendations"]); `savings`: the report's document["savings"] (the potential
    # figure combined, the bill, the standalone sum, the order)
    recommendations: list[dict[str, Any]] = field(default_factory=list)
    savings: dict[str, Any] | None = None
    spend: float | None = None
    wasted: float | None = None
    latency: list[dict[str, Any]] = field(default_factory=list)  # [[cost.latency]] over the range
    # The window's energy and carbon as the report's document["carbon"]; each process's
    # "energy" as the report's (daemon.commands.report_energy); None: no sample in the range.
    carbon: dict[str, Any] | None = None
    # Each price charged in the range where it changed there ((since, HostPrice.as_dict()),
    # oldest first; empty when one price held throughout): every tick is charged at its own.
    price_changes: list[tuple[float, dict[str, Any]]] = field(default_factory=list)


def process_label(target: str, names: dict[str, tuple[int, str]]) -> str:
    """A low-utilization window's row label: 'pid NAME' (the script or module it runs; when
    that is too long, the command as mlcost-top shortens it: the module's last part, cut
    between words, `python -m …checkpoint_heavy`), not the raw 'pid:start_time' key; control
    characters shown as escapes (the renderer HTML-escapes the rest)."""
    found = names.get(target)
    if found is None:
        return one_line(target)[:LABEL_CHARS]
    pid, command = found
    name = one_line(_LABELER.label(command))
    if len(name) > LABEL_CHARS:
        # not cut from the left mid-name ('….sim.workloads.checkpoint_heavy'): the command up
        # to its module or script (its arguments are no name), as mlcost-top shortens it
        words = one_line(command).split()
        named = next((i for i, w in enumerate(words)
                      if w.endswith(".py") or (i and words[i - 1] == "-m")), len(words) - 1)
        name = short_command(" ".join(words[:named + 1]), LABEL_CHARS)
    return f"{pid} {name}"


def collect(path: str | Path, since: float | None = None,
            until: float | None = None) -> ReportData:
    """Read the report of [since, until] (default: the snapshot's range, else all ticks).
    Raises StoreShapeError for a file not shaped like a store (checked before any row is
    read), or one of daemon.store.shape.READ_ERRORS for a row that is not what it should be."""
    reader = StoreReader(str(path), timeout_s=30.0)
    try:
        check_shape(reader)
        return _collect(reader, Path(path), since, until)
    finally:
        reader.close()


def _collect(reader: StoreReader, path: Path, since: float | None,
             until: float | None) -> ReportData:
    facts = snapshot_facts(reader)
    bounds = reader.query("SELECT min(ts) AS lo, max(ts) AS hi FROM ticks")[0]
    first = (bounds["lo"] or 0) / 1000
    last = (bounds["hi"] or 0) / 1000
    start = since if since is not None else float((facts or {}).get("since") or first)
    end = until if until is not None else float((facts or {}).get("until") or last)
    if first and last:  # chart what was recorded: a range that reaches past it is cut to it
        start = max(start, first)
        end = min(end, last) if last > start else end
    host = queries.recorded_host(reader)
    price_doc = host.get("price") if isinstance(host.get("price"), dict) else None
    price = HostPrice.from_dict(price_doc)
    interval = float(host.get("interval_s") or 1.0)
    idle_pct = host.get("idle_utilization_pct")
    thresholds = IdleThresholds(idle_utilization_pct=float(idle_pct) if isinstance(
        idle_pct, int | float) else DEFAULT_IDLE_UTILIZATION_PCT)
    data = ReportData(title=f"mlcost snapshot of {host.get('hostname') or path.name}",
                      since=start, until=end, host=host, price=price_doc, snapshot=facts)
    summary = reader.window_summary(start, end)
    data.gpus = summary["gpus"]
    processes = summary["processes"]

    # Burn and waste over the range, and each process's cost, with the live cost model.
    # Each tick at the price charged then (daemon.analysis.price_history).
    spread = reader.samples(start, end, max_samples=SERIES_POINTS)
    readings = queries.meter_readings(reader, start, end)
    prices = PriceHistory.from_readings(readings, price)
    starts = run_starts(readings)  # nothing is charged between two runs, as live
    # with the range's first and last ticks and those either side of each daemon start, as
    # `mlcostd report` reads them (range_ticks): the spend the report says
    # and of each recording gap inside a run, from the tick before the range (its first tick
    # after the start is charged the interval from it): one read of the tick times for both
    before = tick_before(reader, start)
    gaps = recording_gaps(reader, start if before is None else before, end)
    samples = with_edges(reader, spread, start, end, starts, gaps)
    # The spend, each process's dollars and the energy replay the ticks `mlcostd report` of
    # the range replays (timeline.cost_sample_count, with the same edges and the same gap cap),
    # so the page says its dollars to the cent (probe 157 H2: from the charts' 240-tick spread
    # a process read $0.6793 beside the report's $0.6782); the charts keep their spread.
    cost_ticks = reader.samples(start, end, max_samples=cost_sample_count(end - start,
                                                                        len(processes)))
    costed = with_edges(reader, cost_ticks, start, end, starts, gaps)
    if as_then(host, data.gpus, readings, prices, end) is not None:  # the host at the end
        data.price = host["price"]
    # across a restart onto other GPUs: a row per GPU and model, each over its part (as the
    # report's; the page reads raw ticks, so each part is cut at its change)
    data.gpus = split_by_model(reader, data.gpus, readings, start, end, rolled=False)
    priced = [(sample, charged) for sample in costed
              for charged in (prices.at(sample.ts),) if charged is not None]
    if samples:
        data.price_changes = [(since, charged.as_dict())
                              for since, charged in prices.changes_within(samples[0].ts, end)]
    # each process's burn: its dollars over the seconds it was charged (as the report's)
    rates = BurnRates()
    if priced:
        # (its first tick after the start charged the interval before it, as the report's
        # spend and the review charge it: the tick before the range, where the file holds one)
        ledger = CostLedger(max_gap_s=sampled_gap_s(interval, end - start, len(costed)),
                            run_starts=starts, gap_ends=frozenset(ts for _, ts in gaps))
        ledger.last_ts = before
        for sample, charged in priced:
            current = burn(sample, charged, thresholds)
            rates.add(current, ledger.add(current))
        total, wasted, idle = [], [], []
        for sample in samples:  # the charts' spread
            then = prices.at(sample.ts)
            if then is None:
                continue
            current = burn(sample, then, thresholds)
            total.append((sample.ts, current.total_per_hour))
            wasted.append((sample.ts, current.wasted_per_hour))
            idle.append((sample.ts, current.idle_per_hour))
        data.burn = {"burn $/h": total, "wasted $/h": wasted, "unused $/h": idle}
        spent = ledger.as_dict()
        data.spend, data.wasted = float(spent["total"]), float(spent["wasted"])
        costs = dict(ledger.by_process)
    else:
        costs = {}
    for index in sorted({gpu["index"] for gpu in data.gpus}):  # (a chart line per GPU)
        data.gpu_utilization[index] = [(t, avg) for t, avg, _, _ in reader.gpu_history(
            index, "utilization", start, end, SERIES_POINTS)]
        data.gpu_memory[index] = [(t, avg / 2**30) for t, avg, _, _ in reader.gpu_history(
            index, "memory_used_bytes", start, end, SERIES_POINTS)]

    # Energy and carbon over the same samples; the grid the daemon recorded (no config here).
    jobs = queries.recorded_jobs(reader)  # [cost].jobs as the daemon ran
    grid = recorded_grid(host)
    meter, covered = window_meter(costed, JobLabeler(jobs).label,
                                  sampled_gap_s(interval, end - start, len(cost_ticks)), starts,
                                  frozenset(ts for _, ts in gaps), before)
    energies = meter.processes()
    if costed:
        data.carbon = window_summary(meter, grid, covered, end - start)

    balances = phase_balances(reader, start, end, interval, processes)
    stacks: list[dict[str, Any]] = []
    for proc in processes:
        key = (proc["pid"], proc["start_time"])
        proc["burn_per_hour"] = rates.process(key)
        proc["cost"] = costs.get(key)
        energy = energies.get(key)
        proc["energy"] = None if energy is None else {
            k: v for k, v in energy.as_dict(grid).items() if k != "watts"}
        balance = balances.get(key) or {}
        proc["phases"] = {phase: part["share"] for phase, part in balance.items()
                          if part.get("share")}
        # low when a phase came from /proc alone (no Python stacks: ptrace denied), as the
        # text report says it
        proc["phase_confidence"] = (
            LOW_CONFIDENCE if any(part.get("confidence") == LOW_CONFIDENCE
                                  for part in balance.values()) else HIGH_CONFIDENCE)
        # A row per process, phase and stack, as the report's top_stacks: one line sampled
        # in two phases (61 host_preprocess, 1 unknown) showed as one row "host_preprocess
        # 62"; one stack of two processes counted under the first's name.
        stacks += [dict(stack, phase=phase, pid=proc["pid"], start_time=proc["start_time"],
                        command=proc["command"])
                   for phase, part in balance.items() for stack in part.get("top_stacks") or []]
    data.processes = sorted(processes, key=lambda p: -(p.get("cost") or 0.0))
    # Serving latency beside each target's processes' cost (their jobs as the daemon labelled)
    latency: dict[str, Any] = {"processes": processes, "gpus": data.gpus}
    latency_report.section(latency, readings, start, end, jobs, recorded_cost_between(
        reader, jobs, prices=prices, thresholds=thresholds, interval=interval))
    data.latency = latency["spend"]["latency"]
    names = {process_key(p["pid"], p["start_time"]): (p["pid"], p.get("command") or "")
             for p in processes}
    data.stacks = [dict(s, label=process_label(process_key(s["pid"], s["start_time"]), names))
                   for s in sorted(stacks, key=lambda s: -s["samples"])[:TOP_STACKS]]
    events = costed_to(queries.events(reader, start, end), end)  # open ones to the end
    data.windows = [dict(e, label=process_label(e["target"], names))
                    for e in events if e["kind"] == LOW_UTILIZATION]
    data.events = [dict(e, target_label=process_label(e["target"], names))
                   if e["target"] in names else e
                   for e in events if e["kind"] not in SAMPLED]
    # As they stood at the range's end, with their combined savings and the host's bill: the
    # one reading `mlcostd report` makes (probe 157 H1: the page read each row as it stood when
    # the snapshot was taken, $728/month where the report of the same file said $719; M1: it
    # listed standalone figures that added up to twice the bill). A recommendation about a
    # process is shown by its name too ('22124 idle_notebook').
    listed = recommendations_at.at_end(reader, start, end, data.price, data.gpus)
    data.savings = listed["savings"]
    data.recommendations = [dict(r, target_label=process_label(str(r.get("target")), names))
                            if str(r.get("target")) in names else r
                            for r in listed["recommendations"]]
    return data
