"""Price this host and build the Analyzer from the config, once at start.

The instance comes from the config override, the simulated scenario, or detection (DMI, one
metadata probe). Its price comes from the catalog (bundled, plus `[pricing].extra_catalogs`,
with the live prices of `[pricing].cache` that `mlcostd prices --refresh` wrote), from
`[instance].price_per_hour`, or, off-cloud, from `[instance].price_per_gpu_hour` or an
amortization (pricing.offcloud). Whether that price can be trusted today (pricing.staleness)
is said here once, for the log, `mlcostd check` and `mlcostd report` alike.

The config is plain data (daemon.config); the analysis objects it describes (idle thresholds,
unit-cost meters, budgets, rule limits) are built here, so the config module imports nothing
of analysis.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from datetime import datetime
from typing import Any

from daemon.analysis.analyzer import Analyzer
from daemon.analysis.busy import IdleThresholds
from daemon.analysis.cost import HostPrice, host_price
from daemon.analysis.latency import LatencyMeter
from daemon.analysis.meters import UnitCostMeter
from daemon.config import (
    Config,
    UnitCostSetting,
    latency_setting,
    price_cache_path,
    unit_cost_setting,
)
from daemon.sources.redact import redact_field
from pricing.catalog import LIFECYCLES, Catalog, Price, PricingError
from pricing.offcloud import off_cloud_price
from pricing.offer import HOURS_PER_MONTH, SECONDS_PER_DAY, age_days
from pricing.staleness import Staleness, price_staleness

log = logging.getLogger(__name__)

# The lifecycle of a host its owner bought: no spot or commitment advice applies to it.
OWNED_LIFECYCLE = "owned"
OFF_CLOUD_SOURCE = "config [instance] off-cloud"
# A managed platform's instance (SageMaker ml.*): EC2 spot, shrink and commitment advice, priced
# against self-managed instances, does not apply to it as such.
MANAGED_LIFECYCLE = "managed"


def load_catalog(config: Config) -> Catalog:
    """The catalog the daemon prices with: bundled + [pricing].extra_catalogs, overlaid with
    the live prices in [pricing].cache (so a `mlcostd prices --refresh` is used)."""
    return shown_catalog(Catalog.load(cache_path=price_cache_path(config),
                                      extra_catalogs=config.pricing.extra_catalogs))


def shown_catalog(catalog: Catalog) -> Catalog:
    """`catalog` with each price's source, note and URL redacted (redact_field), once per
    catalog loaded: an extra catalog or a price cache is a file, its source a text anyone who
    wrote it chose (a URL with `?api_key=...`), and the host's price source is in /v1/now, its
    /metrics label, the store, reports and recommendations."""
    return _shown_catalogs(catalog)


@functools.lru_cache(maxsize=4)
def _shown_catalogs(catalog: Catalog) -> Catalog:
    return catalog.with_texts(redact_field)


def price_host(config: Config, simulated_instance: dict[str, Any] | None,
               gpus_seen: int | None, *, log_warning: bool = True
               ) -> tuple[HostPrice, Any, dict[str, Any]]:
    """(the host's price, the catalog, the instance as recorded in the host meta). Blocking:
    detection may probe a metadata endpoint, so run it in a thread. `log_warning`: log a
    price that may be stale (`mlcostd check` shows it as a check of its own instead). On a
    simulated host priced as its scenario's instance (`--simulate`, no [instance] of the
    config) it is logged at debug level only: the scenario's catalog row is what the
    simulation charges, not a price anyone pays, and `mlcostd profile --simulate` in every CI
    run printed a WARNING to refresh the real cloud's price. It is still the price's
    `warning` (reports, /v1/now, mlcost-top's header), and `mlcostd check` still says it."""
    from pricing.detect import detect

    wanted = config.instance
    override: dict[str, Any] = {
        k: v for k, v in (("provider", wanted.provider), ("type", wanted.type),
                          ("region", wanted.region), ("lifecycle", wanted.lifecycle)) if v}
    simulated = bool(simulated_instance) and not override
    if simulated_instance and not override:
        override = {k: v for k, v in simulated_instance.items() if k != "source"}
    instance = detect(override or None)
    catalog = load_catalog(config)
    price = off_cloud_host_price(config, instance, gpus_seen)
    if price is None and wanted.price_per_hour <= 0:
        price = managed_host_price(config, instance, catalog, gpus_seen)
    if price is None:
        price = host_price(instance, catalog, wanted.price_per_hour, wanted.lifecycle,
                           gpu_count_seen=gpus_seen)
    log.info("price: $%.4f/h for the host (%s)", price.per_hour, price.source)
    warning = price_warning(price, catalog)
    if warning is not None and log_warning:
        log.log(logging.DEBUG if simulated else logging.WARNING, "price: %s%s", warning.message,
                " (the simulated instance's catalog price)" if simulated else "")
    price = _annotate(price, warning="" if warning is None else warning.message,
                      electricity_per_kwh=wanted.electricity_per_kwh or None)
    # (a managed price's source is the cache's; the catalog's are redacted as loaded)
    price = dataclasses.replace(price, source=redact_field(price.source),
                                warning=redact_field(price.warning))
    recorded = {"provider": instance.provider, "type": instance.instance_type,
                "region": instance.region, "lifecycle": instance.lifecycle,
                "source": instance.source}
    instance_id = wanted.id or instance.instance_id  # what a resize acts on (AWS only)
    if instance_id:
        recorded["id"] = instance_id
    return price, catalog, recorded


def _annotate(price: HostPrice, *, warning: str, electricity_per_kwh: float | None) -> HostPrice:
    """`price` with its warning and $/kWh: they travel on the price into the host meta and
    /v1/now."""
    return dataclasses.replace(price, warning=warning, electricity_per_kwh=electricity_per_kwh)


def off_cloud_host_price(config: Config, instance: Any, gpus_seen: int | None) -> HostPrice | None:
    """The host price from [instance].price_per_gpu_hour or purchase_price (+ hosting), or None
    when neither is set. Energy is not in it: it is priced beside the burn from the measured
    power (see `energy` in the report and /v1/now)."""
    wanted = config.instance
    if wanted.price_per_gpu_hour <= 0 and wanted.purchase_price <= 0:
        return None
    count = gpus_seen or 0
    note = ""
    if count < 1:
        count = 1
        note = "; no GPU seen at start, priced as 1 GPU"
    priced = off_cloud_price(
        count, price_per_gpu_hour=wanted.price_per_gpu_hour or None,
        purchase_price=wanted.purchase_price or None, years=wanted.amortization_years or None,
        hosting_per_month=wanted.hosting_per_month)
    return HostPrice(priced.per_hour, count, OWNED_LIFECYCLE,
                     getattr(instance, "instance_type", None), getattr(instance, "provider", None),
                     getattr(instance, "region", None), f"{OFF_CLOUD_SOURCE}: {priced.method}{note}",
                     None, False)


def managed_host_price(config: Config, instance: Any, catalog: Catalog,
                       gpus_seen: int | None) -> HostPrice | None:
    """A managed ml.* instance (SageMaker) at its cached managed price, which the catalog of
    self-managed instances does not list; None for other hosts or without a cached price."""
    instance_type = getattr(instance, "instance_type", None)
    if not is_managed_instance(instance_type):
        return None
    from pricing.managed import managed_prices

    provider = getattr(instance, "provider", None) or "aws"
    region = getattr(instance, "region", None)
    found = [p for p in managed_prices(price_cache_path(config))
             if p.provider == provider and p.instance_type.lower() == str(instance_type).lower()
             and (region is None or p.region == region)]
    if not found:
        return None  # host_price says there is no price; `mlcostd check` says how to fetch it
    managed = min(found, key=lambda p: p.price.per_hour)
    base = catalog.by_instance(provider, str(instance_type).removeprefix("ml."))
    count = base.accelerator_count if base is not None else (gpus_seen or 0)
    as_of = managed.price.as_of
    dated = f"fetched {as_of.date().isoformat()}" if managed.price.live and as_of else \
        managed.price.describe()
    return HostPrice(managed.price.per_hour, count, MANAGED_LIFECYCLE, instance_type, provider,
                     managed.region,
                     f"{'live' if managed.price.live else 'bundled'}: {managed.price.source} "
                     f"({managed.platform_name} {managed.component}, {dated})",
                     as_of.isoformat() if as_of else None, managed.price.live)


def _as_of(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def price_warning(price: HostPrice, catalog: Catalog | None,
                  now: float | None = None) -> Staleness | None:
    """The staleness of the price the host is charged at (pricing.staleness: no date, older than
    90 days, from before a price cut, an estimate), or None when it can be trusted or is the
    user's own (config, off-cloud). When the catalog now holds a live price the running daemon
    does not use yet, the message says to restart it."""
    if price.source.startswith("config") or price.lifecycle == OWNED_LIFECYCLE:
        return None
    if not price.provider or not price.instance_type or price.per_hour <= 0:
        return None  # no price at all: NO_PRICE_SOURCE already says how to set one
    kind: Any = price.lifecycle if price.lifecycle in LIFECYCLES else "on-demand"
    as_of = _as_of(price.as_of)
    recorded = Price(price.per_hour, kind, price.source, as_of, live=price.live,
                     status=("pre-cut" if "predates a price cut" in price.source else
                             "estimate" if ", estimate" in price.source else "current"))
    offer = None
    if catalog is not None:
        offer = (catalog.by_instance(price.provider, price.instance_type, price.region)
                 if price.region else None) or catalog.by_instance(price.provider,
                                                                    price.instance_type)
    current = None if offer is None else (offer.price(kind) or offer.on_demand)
    if (current is not None and not current.live and not price.live
            and abs(current.per_hour - price.per_hour) < 1e-6):
        recorded = current  # the very catalog row: its status and note say why
    verdict = price_staleness(recorded, price.provider, price.region, price.instance_type,
                              now=now)
    if not verdict.stale:
        return None
    if current is not None and current.live and not price.live:
        run = f"; run `{verdict.refresh_command}`"
        verdict = dataclasses.replace(verdict, message=verdict.message.replace(run, (
            f"; the price cache already has ${current.per_hour:g}/h ({current.describe()}): "
            "restart mlcostd to use it"), 1))
    return verdict


def warning_json(verdict: Staleness | None) -> dict[str, Any] | None:
    """A price warning as the report's `host.price_warning` object; None when there is none."""
    if verdict is None:
        return None
    return {"reason": verdict.reason,
            # whole days, as the warning and `mlcostd prices` say it (460.6 days: 460)
            "age_days": None if verdict.age_days is None else age_days(
                verdict.age_days * SECONDS_PER_DAY),
            "message": verdict.message, "refresh_command": verdict.refresh_command}


def is_managed_instance(instance_type: str | None) -> bool:
    """A managed ML platform instance as the host sees itself (SageMaker names its instances
    ml.<type>; Vertex AI and Azure ML hosts carry their VM's name, see [pricing].compare_managed)."""
    return bool(instance_type) and str(instance_type).startswith("ml.")


def managed_review(config: Config, price: HostPrice, catalog: Catalog,
                   hours_per_month: float = HOURS_PER_MONTH) -> dict[str, Any] | None:
    """The managed-vs-self-managed comparison for the report's review when the host is a
    managed instance or [pricing].compare_managed is set; None when neither. Without the
    prices it needs, `error` says which and the command that fetches them."""
    instance_type = price.instance_type
    if not (is_managed_instance(instance_type) or config.pricing.compare_managed):
        return None
    from pricing.managed import PLATFORM_OF_PROVIDER, compare_managed

    provider = price.provider or ""
    if not instance_type or provider not in PLATFORM_OF_PROVIDER:
        return {"error": "the managed comparison knows "
                         + ", ".join(f"{p.name} ({p.provider})" for p in
                                     PLATFORM_OF_PROVIDER.values())
                         + f"; this host is {provider or 'off-cloud'}/"
                           f"{instance_type or 'unknown type'}"}
    region = price.region or PLATFORM_OF_PROVIDER[provider].default_region
    try:
        compared = compare_managed(catalog, instance_type, region, price_cache_path(config),
                                   provider=provider, hours_per_month=hours_per_month)
    except PricingError as exc:
        return {"error": str(exc)}
    return {"platform": compared.platform, "component": compared.component,
            "instance_type": compared.instance_type,
            "managed_instance_type": compared.managed_instance_type, "region": compared.region,
            "managed_per_hour": compared.managed_per_hour,
            "self_managed_per_hour": compared.self_managed_per_hour,
            "hours_per_month": round(compared.hours_per_month, 1),
            "monthly_difference": round(compared.monthly_difference, 2),
            "markup_pct": round(compared.markup_pct, 2),
            # (a managed price's source is the price cache's text: redacted as the catalog's)
            "summary": redact_field(compared.describe()),
            "managed_source": redact_field(compared.managed_source),
            "self_managed_source": redact_field(compared.self_managed_source)}


def idle_thresholds(config: Config) -> IdleThresholds:
    """`[idle]` as the detector's thresholds (a GPU resumes at twice the idle level, +5 %)."""
    idle = config.idle
    return IdleThresholds(
        idle_utilization_pct=idle.utilization,
        resume_utilization_pct=max(idle.utilization * 2, idle.utilization + 5),
        gpu_held_after_s=idle.gpu_held_after, gpu_unheld_after_s=idle.gpu_unheld_after,
        host_after_s=idle.host_after)


def meter(setting: UnitCostSetting) -> UnitCostMeter:
    """The analysis meter that a checked [[cost.unit_costs]] setting describes."""
    return UnitCostMeter(**dataclasses.asdict(setting))


def build_analyzer(config: Config, price: HostPrice, catalog: Any) -> Analyzer:
    """The Analyzer for this host: idle thresholds, jobs, budgets, storage, unit costs, rules."""
    idle, cost = config.idle, config.cost
    limits = {"idle_held_min_s": idle.gpu_held_after, "host_idle_min_s": idle.host_after,
              "longest_period_s": idle.longest_period,
              "shrink_min_window_s": cost.shrink_min_window,
              "spot_min_runtime_s": cost.spot_min_runtime,
              "rightsize_evidence_s": cost.rightsize_evidence,
              "spot_evidence_s": cost.spot_evidence,
              "commitment_evidence_s": cost.commitment_evidence}
    meters = [meter(unit_cost_setting(table)) for table in cost.unit_costs]
    return Analyzer(price, catalog, idle_thresholds(config), jobs=cost.jobs,
                    budgets=cost.budgets,
                    storage_paths={path: cost.storage_price_per_gb_month
                                   for path in cost.storage_paths},
                    unit_costs=meters, limits=limits,
                    recommendation_hold_s=cost.recommendation_hold,
                    grid_g_per_kwh=config.energy.grid_intensity_g_per_kwh,
                    grid_region=config.energy.region,
                    latency=[LatencyMeter(**dataclasses.asdict(latency_setting(table)))
                             for table in cost.latency])
