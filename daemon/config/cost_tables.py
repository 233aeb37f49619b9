"""The tables of [cost] that hold tables: [cost.budgets], [[cost.unit_costs]] and
[[cost.latency]], each checked with an error that names the key, the value and what is allowed.
Config stays plain data: the runtime turns these settings into budgets and meters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.config.values import check_http_url, did_you_mean, toml_key, toml_value

BUDGET_PERIODS = ("daily", "monthly")


def check_budgets(table: dict[str, Any]) -> None:
    """[cost.budgets] is host / user.NAME / job.NAME tables of daily and/or monthly dollars,
    and an optional webhook URL; ValueError names the key, the value and what is allowed.
    (The budgets themselves are built by daemon.analysis.budgets; config stays plain data.)"""
    for key, value in table.items():
        if key == "webhook":
            check_http_url("[cost.budgets].webhook", value, "a webhook")
        elif key == "host":
            _check_periods(value, "[cost.budgets.host]")
        elif key in ("user", "job"):
            if not isinstance(value, dict):
                raise ValueError(f"[cost.budgets.{key}] must be a table of name = "
                                 "{daily, monthly}")
            for name, limits in value.items():
                _check_periods(limits, f"[cost.budgets.{key}.{toml_key(name)}]")
        else:
            raise ValueError(f"unknown key [cost.budgets].{toml_key(key)}"
                             f"{did_you_mean(key, ('host', 'user', 'job', 'webhook'))}; allowed: "
                             "host, user, job, webhook")


def _check_periods(limits: Any, where: str) -> None:
    if not isinstance(limits, dict):
        raise ValueError(f"{where} must be a table with daily and/or monthly dollars")
    for period, limit in limits.items():
        if period not in BUDGET_PERIODS:
            raise ValueError(f"{where}.{toml_key(period)}: unknown period"
                             f"{did_you_mean(period, BUDGET_PERIODS)}; allowed: daily, monthly")
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
            raise ValueError(f"{where}.{period} = {toml_value(limit)}: must be a number of dollars > 0")


@dataclass(frozen=True)
class UnitCostSetting:
    """One [[cost.unit_costs]] table, checked: dollars per `per` units of a Prometheus counter
    for a job or a process. The runtime turns it into a daemon.analysis.meters.UnitCostMeter."""

    target: str
    url: str
    metric: str
    unit: str = "tokens"
    per: float = 1_000_000.0
    labels: dict[str, str] = field(default_factory=dict)


_UNIT_COST_KEYS: dict[str, type | tuple[type, ...]] = {"target": str, "url": str, "metric": str, "unit": str, "per": (int, float),
                   "labels": dict}


def unit_cost_setting(table: dict[str, Any]) -> UnitCostSetting:
    """A [[cost.unit_costs]] table as a UnitCostSetting; ValueError names the key."""
    for key, value in table.items():
        if key not in _UNIT_COST_KEYS:
            raise ValueError(f"unknown key {toml_value(key)}{did_you_mean(key, _UNIT_COST_KEYS)}; "
                             f"allowed: {', '.join(_UNIT_COST_KEYS)}")
        if not isinstance(value, _UNIT_COST_KEYS[key]) or isinstance(value, bool):
            raise ValueError(f"{key} = {toml_value(value)[:200]} has the wrong type")
    for key in ("target", "url", "metric"):
        if not table.get(key):
            raise ValueError(f"{key} is required")
    check_http_url("url", table["url"], "a /metrics page")
    if table.get("per", 1) <= 0:
        raise ValueError(f"per = {toml_value(table['per'])}: must be > 0")
    return UnitCostSetting(**table)


@dataclass(frozen=True)
class LatencySetting:
    """One [[cost.latency]] table, checked: a Prometheus latency histogram (in seconds) of a
    server, for a job or a process. The runtime turns it into a
    daemon.analysis.latency.LatencyMeter."""

    target: str
    url: str
    metric: str
    labels: dict[str, str] = field(default_factory=dict)


_LATENCY_KEYS: dict[str, type] = {"target": str, "url": str, "metric": str, "labels": dict}


def latency_setting(table: dict[str, Any]) -> LatencySetting:
    """A [[cost.latency]] table as a LatencySetting; ValueError names the key."""
    if not isinstance(table, dict):
        raise ValueError(f"{toml_value(table)[:200]} is not a table")
    for key, value in table.items():
        if key not in _LATENCY_KEYS:
            raise ValueError(f"unknown key {toml_value(key)}{did_you_mean(key, _LATENCY_KEYS)}; "
                             f"allowed: {', '.join(_LATENCY_KEYS)}")
        if not isinstance(value, _LATENCY_KEYS[key]):
            raise ValueError(f"{key} = {toml_value(value)[:200]} has the wrong type")
    for key in ("target", "url", "metric"):
        if not table.get(key):
            raise ValueError(f"{key} is required")
    check_http_url("url", table["url"], "a /metrics page")
    labels = table.get("labels") or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError(f"labels = {toml_value(labels)[:200]}: names and values must be strings")
    return LatencySetting(**table)
