"""`mlcostd prices --observed`: the GPU selection matrix for a workload this host has run.

What the workload needs is read from the store (GPUs it kept busy, peak memory per GPU, how
long it has run); the instances that fit come from the pricing catalog, with on-demand and spot
prices and the estimated cost of one run.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from daemon.store.reader import StoreReader
from pricing import Catalog
from pricing.catalog import InstanceOffer

GIB = 1 << 30
HEADROOM = 0.10
IDLE_SM_TENTHS = 50  # a mean SM share under 5% (stored in tenths of a percent) is idle


@dataclass(frozen=True)
class Need:
    """What an observed workload needs: GPUs, memory per GPU, and how long a run takes."""

    what: str  # "host" or "pid PID (command)"
    gpus: int
    peak_gib_per_gpu: float
    run_hours: float
    run_hours_source: str


def observed_need(reader: StoreReader, since_s: float, pid: int | None = None,
                  run_hours: float | None = None) -> Need:
    """The need of process `pid`, or of all GPU processes of the host, over the last since_s."""
    until = time.time()
    since = until - since_s
    rows = reader.query(
        "SELECT p.pid, p.start_ms, p.command, s.gpu, max(s.mem) AS peak, min(s.ts) AS first,"
        " max(s.ts) AS last, avg(s.sm) AS sm FROM proc_gpu_samples s JOIN processes p"
        " ON p.id = s.proc WHERE s.ts >= ? AND s.ts <= ? GROUP BY s.proc, s.gpu",
        (round(since * 1000), round(until * 1000)))
    if pid is not None:
        rows = [r for r in rows if r["pid"] == pid]
        if not rows:
            raise ValueError(f"no GPU process with pid {pid} in the last {since_s:g} s")
    # A GPU that a process held but hardly used is not part of the need (release it instead).
    working = [r for r in rows if (r["sm"] or 0) >= IDLE_SM_TENTHS] or rows
    if not working:
        raise ValueError(f"no GPU process was recorded in the last {since_s:g} s")
    gpus = len({r["gpu"] for r in working})
    peak = max(r["peak"] or 0 for r in working) / GIB
    if run_hours is not None:
        hours, source = run_hours, "--run-hours"
    else:
        longest = max(r["last"] / 1000 - r["start_ms"] / 1000 for r in working)
        hours, source = longest / 3600, "observed runtime so far (pass --run-hours for a full run)"
    what = "host (all GPU processes)"
    if pid is not None:
        what = f"pid {pid} ({working[0]['command'][:60]})"
    return Need(what, gpus, peak, hours, source)


def selection_matrix(need: Need, catalog: Catalog, *, provider: str | None = None,
                     region: str | None = None, limit: int = 15) -> list[dict[str, Any]]:
    """Instances that fit the need, cheapest on-demand first, with the cost of one run."""
    offers: list[InstanceOffer] = catalog.cheapest_fitting(
        need.peak_gib_per_gpu, gpu_count=need.gpus, provider=provider, region=region,
        headroom=HEADROOM, limit=limit)
    rows = []
    for offer in offers:
        on_demand = offer.price("on-demand")
        spot = offer.price("spot")
        rows.append({
            "provider": offer.provider, "region": offer.region,
            "instance_type": offer.instance_type, "accelerator": offer.accelerator,
            "gpus": offer.accelerator_count, "gib_per_gpu": offer.accelerator_memory_gib,
            "on_demand_per_hour": on_demand.per_hour if on_demand else None,
            "spot_per_hour": spot.per_hour if spot else None,
            "run_cost_on_demand": on_demand.per_hour * need.run_hours if on_demand else None,
            "run_cost_spot": spot.per_hour * need.run_hours if spot else None,
            "price_source": on_demand.describe() if on_demand else None,
            "sources": [f"{kind}: {price.source} ({price.describe()})"
                        for kind, price in (("on-demand", on_demand), ("spot", spot)) if price],
        })
    return rows


def render(need: Need, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"workload: {need.what}",
        f"needs {need.gpus} GPU(s) with >= {need.peak_gib_per_gpu * (1 + HEADROOM):.1f} GiB each "
        f"(peak {need.peak_gib_per_gpu:.1f} GiB + {HEADROOM:.0%} headroom); one run = "
        f"{need.run_hours:.2f} h ({need.run_hours_source})",
        "",
    ]
    if not rows:
        return "\n".join(lines + ["no instance in the catalog fits this workload"]) + "\n"
    header = ["provider", "region", "instance", "GPU", "n", "GiB", "on-demand $/h", "spot $/h",
              "run on-demand", "run spot", "prices"]
    footnotes: dict[str, int] = {}  # every price's source and age, numbered once

    def notes(row: dict[str, Any]) -> str:
        return ",".join(str(footnotes.setdefault(text, len(footnotes) + 1))
                        for text in row["sources"])

    def money(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"${value:,.{digits}f}"

    table = [[r["provider"], r["region"], r["instance_type"], r["accelerator"], str(r["gpus"]),
              f"{r['gib_per_gpu']:g}", money(r["on_demand_per_hour"], 4),
              money(r["spot_per_hour"], 4), money(r["run_cost_on_demand"]),
              money(r["run_cost_spot"]), f"[{notes(r)}]"] for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(header)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in table]
    lines.append("")
    lines.append("prices (spot is the midpoint of the zones' range):")
    lines += [f"  [{number}] {text}" for text, number in footnotes.items()]
    return "\n".join(lines) + "\n"


def as_json(need: Need, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"need": asdict(need), "headroom": HEADROOM, "instances": rows}
