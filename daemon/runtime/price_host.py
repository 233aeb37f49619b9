"""Price this host and build the Analyzer from the config, once at start.

The instance comes from the config override, the simulated scenario, or detection (DMI, one
metadata probe); its price from the catalog or `[instance].price_per_hour`. The config is plain
data (daemon.config); the analysis objects it describes (idle thresholds, unit-cost meters,
budgets, rule limits) are built here, so the config module imports nothing of analysis.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from daemon.analysis.analyzer import Analyzer
from daemon.analysis.busy import IdleThresholds
from daemon.analysis.cost import HostPrice, host_price
from daemon.analysis.meters import UnitCostMeter
from daemon.config import Config, UnitCostSetting, unit_cost_setting

log = logging.getLogger(__name__)


def price_host(config: Config, simulated_instance: dict[str, Any] | None,
               gpus_seen: int | None) -> tuple[HostPrice, Any, dict[str, Any]]:
    """(the host's price, the catalog, the instance as recorded in the host meta). Blocking:
    detection may probe a metadata endpoint, so run it in a thread."""
    from pricing import Catalog, detect

    wanted = config.instance
    override: dict[str, Any] = {
        k: v for k, v in (("provider", wanted.provider), ("type", wanted.type),
                          ("region", wanted.region), ("lifecycle", wanted.lifecycle)) if v}
    if simulated_instance and not override:
        override = {k: v for k, v in simulated_instance.items() if k != "source"}
    instance = detect(override or None)
    catalog = Catalog.load()
    price = host_price(instance, catalog, wanted.price_per_hour, wanted.lifecycle,
                       gpu_count_seen=gpus_seen)
    log.info("price: $%.4f/h for the host (%s)", price.per_hour, price.source)
    recorded = {"provider": instance.provider, "type": instance.instance_type,
                "region": instance.region, "lifecycle": instance.lifecycle,
                "source": instance.source}
    return price, catalog, recorded


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
              "shrink_min_window_s": cost.shrink_min_window,
              "spot_min_runtime_s": cost.spot_min_runtime}
    meters = [meter(unit_cost_setting(table)) for table in cost.unit_costs]
    return Analyzer(price, catalog, idle_thresholds(config), jobs=cost.jobs,
                    budgets=cost.budgets,
                    storage_paths={path: cost.storage_price_per_gb_month
                                   for path in cost.storage_paths},
                    unit_costs=meters, limits=limits)
