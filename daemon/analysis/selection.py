"""`mlcostd prices --observed`: the selection matrix for a workload this host has run, ranked
per workload kind, with the specialty accelerators beside the GPUs.

What the workload needs is read from the store (GPUs it kept busy, peak memory per GPU, how
long it has run, the kinds its processes had); the instances that fit come from the pricing
catalog, with on-demand and spot prices, each with its source and date.

Ranked per kind (KIND_RANKING), because what a kind buys differs:

- training: the cost of one run at spot where a spot price is listed (a run that checkpoints
  resumes after an interruption), else on-demand; one host with at least as many accelerators;
- batch inference: the cost of the same accelerator-hours at spot (a batch splits across
  smaller hosts and is retried), so the price per accelerator-hour ranks;
- online inference: a month of serving on demand, or the cheapest commitment listed (a server
  runs all month; a reclaimed spot host drops requests), one replica per host.

A GPU row's run cost assumes the run takes as long as it did here (ASSUMED_SPEED: the same
speed on every GPU, which a newer GPU beats and an older one does not reach). Inferentia,
Trainium and TPU rows have no run cost: their speed is not comparable until the model is
ported and measured, so each says what moving costs (MIGRATION) and is ranked by its price.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from daemon import clock
from daemon.analysis.kinds import (
    BATCH_INFERENCE,
    ONLINE_INFERENCE,
    TRAINING,
    recorded_kind,
)
from daemon.sources.redact import redact_field
from daemon.store import queries
from daemon.store.reader import StoreReader, stored_command
from daemon.wire import cells, money, pad
from pricing import Catalog
from pricing.catalog import InstanceOffer
from pricing.offer import HOURS_PER_MONTH

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
    kinds: tuple[str, ...] = ()  # the workload kinds its working processes had, as recorded
    gpu_models: tuple[str, ...] = field(default=())  # the GPUs it ran on here (NVML names)


def observed_need(reader: StoreReader, since_s: float, pid: int | None = None,
                  run_hours: float | None = None, kind: str | None = None,
                  until: float | None = None) -> Need:
    """The need of process `pid`, or of all GPU processes of the host, over the since_s before
    `until` (None: now); with `kind`, of those recorded with that workload kind only."""
    until = clock.now() if until is None else until
    since = until - since_s
    rows = reader.query(
        "SELECT s.proc, p.pid, p.start_ms, p.command, s.gpu, min(s.ts) AS first,"
        " max(s.ts) AS last, avg(s.sm) AS sm FROM proc_gpu_samples s JOIN processes p"
        " ON p.id = s.proc WHERE s.ts >= ? AND s.ts <= ? GROUP BY s.proc, s.gpu",
        (round(since * 1000), round(until * 1000)))
    if pid is not None:
        rows = [r for r in rows if r["pid"] == pid]
        if not rows:
            raise ValueError(f"no GPU process with pid {pid} in the last {since_s:g} s")
    recorded = queries.process_kinds(reader)

    def kind_of(row: Any) -> str | None:
        return recorded_kind(recorded.get((row["pid"], row["start_ms"] / 1000)))["kind"]

    if kind is not None:
        rows = [r for r in rows if kind_of(r) == kind]
        if not rows:
            raise ValueError(f"no GPU process recorded as {kind} in the last {since_s:g} s")
    # A GPU that a process held but hardly used is not part of the need (release it instead).
    working = [r for r in rows if (r["sm"] or 0) >= IDLE_SM_TENTHS] or rows
    if not working:
        raise ValueError(f"no GPU process was recorded in the last {since_s:g} s")
    gpus = len({r["gpu"] for r in working})
    # Per GPU, what its working processes held together at once (8 processes of 2 GiB on a GPU
    # need 16 GiB of it, not 2), at the tick that held the most.
    peak = (reader.query(
        "SELECT max(held) AS peak FROM (SELECT sum(mem) AS held FROM proc_gpu_samples WHERE "
        "ts >= ? AND ts <= ? AND (proc, gpu) IN (SELECT json_extract(value, '$[0]'), "
        "json_extract(value, '$[1]') FROM json_each(?)) GROUP BY ts, gpu)",
        (round(since * 1000), round(until * 1000),
         json.dumps(sorted({(r["proc"], r["gpu"]) for r in working}))))[0]["peak"] or 0) / GIB
    if run_hours is not None:
        hours, source = run_hours, "--run-hours"
    else:
        longest = max(r["last"] / 1000 - r["start_ms"] / 1000 for r in working)
        hours, source = longest / 3600, "observed runtime so far (pass --run-hours for a full run)"
    what = "host (all GPU processes)" if kind is None else f"its {kind} processes"
    if pid is not None:
        what = f"pid {pid} ({stored_command(working[0]['command'])[:60]})"
    kinds = {kind_of(r) for r in working}
    names = reader.query("SELECT gpu, name FROM gpus")
    models = {redact_field(n["name"]) for n in names if n["gpu"] in {r["gpu"] for r in working}
              and isinstance(n["name"], str)}
    return Need(what, gpus, peak, hours, source,
                tuple(sorted(k for k in kinds if k in KIND_RANKING)),
                tuple(sorted(m[:60] for m in models)))


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


# How each kind ranks (the module docstring says why).
KIND_RANKING: dict[str, str] = {
    TRAINING: "the cost of one run, at spot where a spot price is listed (a run that "
              "checkpoints resumes after an interruption), else on demand; one host with at "
              "least as many accelerators",
    BATCH_INFERENCE: "the cost of the same accelerator-hours, at spot where listed (a batch "
                     "splits across smaller hosts and is retried), else on demand: the price "
                     "per accelerator-hour ranks",
    ONLINE_INFERENCE: f"a month of serving ({HOURS_PER_MONTH:g} h) on demand or at the cheapest "
                      "commitment listed, never spot (a reclaimed host drops requests); one "
                      "replica per host",
}
KIND_ORDER = (TRAINING, BATCH_INFERENCE, ONLINE_INFERENCE)

# The accelerators that are not CUDA GPUs: the kinds each is built for, and what moving costs.
NEURON_MIGRATION = (
    "moving costs: the AWS Neuron SDK (torch-neuronx, the neuronx-cc compiler): the model is "
    "compiled ahead of time for fixed input shapes (a first compile takes time; cache it, "
    "pad or bucket inputs); CUDA code does not run (custom CUDA kernels and extensions, "
    "FlashAttention's CUDA build, bitsandbytes); supported model families are those Neuron "
    "lists (optimum-neuron, NxD Inference/Training: Llama, Mistral, Mixtral, Qwen, BERT, ViT, "
    "Stable Diffusion and more), others need porting; the runtime changes (serve with vLLM's "
    "Neuron backend or TGI via optimum-neuron, train with NxD Training or optimum-neuron)")
XLA_MIGRATION = (
    "moving costs: XLA compilation (JAX, or PyTorch/XLA): the graph is compiled per input "
    "shape and a new shape recompiles (pad or bucket inputs); CUDA code does not run (custom "
    "kernels, bitsandbytes, FlashAttention's CUDA build); supported model families are those "
    "JAX/MaxText and PyTorch/XLA carry (Llama, Gemma, Mistral, T5, ViT and more), others need "
    "porting; the runtime changes (serve with vLLM's TPU backend or JetStream, train with "
    "MaxText or PyTorch/XLA FSDP)")
# accelerator name prefix (lowercase) -> (kinds it is offered for, family, migration note)
SPECIALTY: dict[str, tuple[tuple[str, ...], str, str]] = {
    "inferentia2": ((BATCH_INFERENCE, ONLINE_INFERENCE), "AWS Neuron", NEURON_MIGRATION),
    "trainium2": ((TRAINING, BATCH_INFERENCE, ONLINE_INFERENCE), "AWS Neuron", NEURON_MIGRATION),
    "trainium": ((TRAINING, BATCH_INFERENCE), "AWS Neuron", NEURON_MIGRATION),
    "tpu-v5p": ((TRAINING,), "Google TPU (XLA)", XLA_MIGRATION),
    "tpu-v5e": ((TRAINING, BATCH_INFERENCE, ONLINE_INFERENCE), "Google TPU (XLA)",
                XLA_MIGRATION),
    "tpu-v6e": ((TRAINING, BATCH_INFERENCE, ONLINE_INFERENCE), "Google TPU (XLA)",
                XLA_MIGRATION),
}
SPECIALTY_SPEED = ("speed not comparable with the GPU it ran on: no run cost until the model "
                   "is ported and measured")


def _specialty(offer: InstanceOffer) -> tuple[tuple[str, ...], str, str] | None:
    name = offer.accelerator.lower()
    for prefix in sorted(SPECIALTY, key=len, reverse=True):  # trainium2 before trainium
        if name.startswith(prefix):
            return SPECIALTY[prefix]
    return None


def assumed_speed(need: Need) -> str:
    """What a GPU row's run cost assumes, in words."""
    here = ", ".join(need.gpu_models) or "the GPUs it ran on"
    return (f"assumes the work takes as long as it did here ({need.run_hours:.2f} h on "
            f"{here}): the same speed on every GPU; a newer GPU (H100 over A100) shortens it, "
            "an older one (T4, V100) lengthens it")


def kinds_to_rank(need: Need, asked: str | None = None) -> tuple[list[str], str]:
    """(the kinds to rank for, why those): `asked` ('all' or one kind), else the kinds the
    workload's processes were recorded with, else all three."""
    if asked == "all":
        return list(KIND_ORDER), "all kinds (--kind all)"
    if asked:
        return [asked], f"--kind {asked}"
    if need.kinds:
        return [k for k in KIND_ORDER if k in need.kinds], "the kinds recorded for its processes"
    return list(KIND_ORDER), ("no training or inference kind recorded for its processes: "
                              "every kind shown")


def _price_for(offer: InstanceOffer, kind: str) -> tuple[str, Any] | None:
    """(lifecycle, price) a kind buys this offer at, or None when that price is unknown."""
    if kind == ONLINE_INFERENCE:
        choices = [("on-demand", offer.on_demand)]
        best = offer.best_commitment()
        if best is not None:
            choices.append((f"commit-{best[0]}y", best[1]))
        known = [(life, price) for life, price in choices if price is not None]
        return min(known, key=lambda c: c[1].per_hour) if known else None
    if offer.spot is not None:
        return "spot", offer.spot
    return ("on-demand", offer.on_demand) if offer.on_demand is not None else None


def kind_matrix(need: Need, catalog: Catalog, kind: str, *, provider: str | None = None,
                region: str | None = None, limit: int = 10) -> dict[str, Any]:
    """The instances that fit `need` ranked for `kind` (KIND_RANKING): GPU rows with the cost
    the kind pays and what it assumes; specialty rows (Inferentia, Trainium, TPU) offered for
    that kind, ranked by price, each with what moving costs and no run cost."""
    per_gpu = need.peak_gib_per_gpu * (1 + HEADROOM)
    gpu_rows: list[tuple[float, dict[str, Any]]] = []
    specialty_rows: list[tuple[float, dict[str, Any]]] = []
    for offer in catalog.filter(provider=provider, region=region):
        chosen = _price_for(offer, kind)
        if chosen is None or offer.accelerator_count <= 0:
            continue
        lifecycle, price = chosen
        per_accelerator = price.per_hour / offer.accelerator_count
        row: dict[str, Any] = {
            "provider": offer.provider, "region": offer.region,
            "instance_type": offer.instance_type, "accelerator": offer.accelerator,
            "accelerators": offer.accelerator_count,
            "gib_per_accelerator": offer.accelerator_memory_gib,
            "lifecycle": lifecycle, "per_hour": price.per_hour,
            "per_accelerator_hour": round(per_accelerator, 6),
            "price_source": f"{lifecycle}: {price.source} ({price.describe()})",
            "as_of": price.as_of.date().isoformat() if price.as_of else None,
        }
        special = _specialty(offer)
        if special is None:
            if not offer.is_gpu or offer.accelerator_memory_gib + 1e-9 < per_gpu:
                continue
            if kind != BATCH_INFERENCE and offer.accelerator_count < need.gpus:
                continue
            if kind == TRAINING:
                cost, what = price.per_hour * need.run_hours, "run"
            elif kind == BATCH_INFERENCE:
                cost, what = per_accelerator * need.gpus * need.run_hours, "batch"
            else:
                cost, what = price.per_hour * HOURS_PER_MONTH, "month"
            row.update(cost=round(cost, 2), cost_of=what, assumes=assumed_speed(need)
                       if kind != ONLINE_INFERENCE else
                       "assumes one replica per host serves the load it served here")
            gpu_rows.append((cost, row))
            continue
        kinds, family, migration = special
        total = offer.accelerator_count * offer.accelerator_memory_gib
        if kind not in kinds or total + 1e-9 < per_gpu * need.gpus:
            continue
        rank = per_accelerator if kind == BATCH_INFERENCE else price.per_hour
        row.update(cost=None, cost_of=None, family=family, migration=migration,
                   assumes=SPECIALTY_SPEED,
                   fits=f"{total:g} GiB in all across {offer.accelerator_count} chip(s), "
                        "with the model sharded across them")
        specialty_rows.append((rank, row))
    gpu_rows.sort(key=lambda item: (item[0], item[1]["instance_type"]))
    specialty_rows.sort(key=lambda item: (item[0], item[1]["instance_type"]))
    return {"kind": kind, "ranked_by": KIND_RANKING[kind], "need": asdict(need),
            "gpus": [row for _, row in gpu_rows[:limit]],
            "specialty": [row for _, row in specialty_rows[:limit]]}


def render_kinds(need: Need, sections: list[dict[str, Any]], why: str) -> str:
    """The per-kind matrices as text: a table per kind, the moving costs of each specialty
    family once, and every price's source and date as numbered notes at the end."""
    lines = [
        f"workload: {need.what}",
        f"needs {need.gpus} GPU(s) with >= {need.peak_gib_per_gpu * (1 + HEADROOM):.1f} GiB each "
        f"(peak {need.peak_gib_per_gpu:.1f} GiB + {HEADROOM:.0%} headroom); one run = "
        f"{need.run_hours:.2f} h ({need.run_hours_source})",
        f"ranked for: {why}",
    ]
    footnotes: dict[str, int] = {}

    def note(row: dict[str, Any]) -> str:
        return f"[{footnotes.setdefault(row['price_source'], len(footnotes) + 1)}]"

    def table(header: list[str], body: list[list[str]]) -> list[str]:
        widths = [max(cells(h), *(cells(r[i]) for r in body)) for i, h in enumerate(header)]
        return ["  " + "  ".join(pad(c, w) for c, w in zip(row, widths, strict=True)).rstrip()
                for row in [header, *body]]

    for section in sections:
        kind = section["kind"]
        lines += ["", f"{kind}: ranked by {section['ranked_by']}"]
        own = section.get("need") or {}
        if own and own.get("what") != need.what:  # the need of this kind's processes alone
            lines.append(f"  for {own['what']}: {own['gpus']} GPU(s) with >= "
                         f"{own['peak_gib_per_gpu'] * (1 + HEADROOM):.1f} GiB each; one run = "
                         f"{own['run_hours']:.2f} h")
        cost_name = {TRAINING: "run cost", BATCH_INFERENCE: "batch cost",
                     ONLINE_INFERENCE: "month"}[kind]
        if section["gpus"]:
            lines += table(["provider", "region", "instance", "GPU", "n", "GiB", "$/h",
                            "buys at", cost_name, "price"],
                           [[r["provider"], r["region"], r["instance_type"], r["accelerator"],
                             str(r["accelerators"]), f"{r['gib_per_accelerator']:g}",
                             money(r["per_hour"], 4), r["lifecycle"], money(r["cost"]),
                             note(r)] for r in section["gpus"]])
            lines.append(f"  GPU rows' {cost_name} {section['gpus'][0]['assumes']}")
        else:
            lines.append("  no GPU instance in the catalog fits")
        if section["specialty"]:
            lines.append("  specialty accelerators (" + SPECIALTY_SPEED + "; ranked by "
                         + ("$/chip-hour" if kind == BATCH_INFERENCE else "$/h") + "):")
            lines += table(["provider", "region", "instance", "chip", "n", "GiB", "$/h",
                            "buys at", "$/chip-h", "price"],
                           [[r["provider"], r["region"], r["instance_type"], r["accelerator"],
                             str(r["accelerators"]), f"{r['gib_per_accelerator']:g}",
                             money(r["per_hour"], 4), r["lifecycle"],
                             money(r["per_accelerator_hour"], 4), note(r)]
                            for r in section["specialty"]])
            for family in dict.fromkeys(r["family"] for r in section["specialty"]):
                migration = next(r["migration"] for r in section["specialty"]
                                 if r["family"] == family)
                lines.append(f"    {family}: {migration}")
    lines += ["", "prices (spot is the midpoint of the zones' range):"]
    lines += [f"  [{number}] {text}" for text, number in footnotes.items()]
    return "\n".join(lines) + "\n"


def as_json(need: Need, rows: list[dict[str, Any]],
            sections: list[dict[str, Any]] | None = None, why: str = "") -> dict[str, Any]:
    """`instances`: the GPUs that fit, cheapest on demand (any kind); `kinds`: the matrices
    per kind with the specialty accelerators (kind_matrix), `ranked_for` why those kinds."""
    return {"need": asdict(need), "headroom": HEADROOM, "instances": rows,
            "kinds": sections or [], "ranked_for": why}
