"""What the cost model says at one tick, typed: the analyzer's state as /v1/now shows it.

Analyzer.cost_state builds it once per document (the live daemon), replay from the store; the
document reads it as it is, with no dict flattened by one side and read back by the other.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class ProcessCost(NamedTuple):
    """What the cost model says of one process at this tick, as /v1/now shows it: read from
    the analyzer's typed state once per document, not flattened into a dict and read back."""

    burn_per_hour: float
    cost: float  # dollars so far
    job: str | None
    energy: dict[str, Any] | None  # EnergyTotal.as_dict: its watts now, joules, kWh, CO2e


class CostState(NamedTuple):
    """The analyzer's state at this tick, JSON-ready where /v1/now shows it as it is: the
    host's burn (price apart), the ledger, each process's `ProcessCost` by process key, the
    events shown and the active recommendations, the energy so far, and the host's spend on
    the UTC day of this tick (Analyzer.spend_today: before this daemon's start too), and where
    each budget stands."""

    price: dict[str, Any]
    burn: dict[str, Any]
    ledger: dict[str, Any]
    processes: dict[str, ProcessCost]
    events: list[dict[str, Any]]
    recommendations: list[dict[str, Any]]
    energy: dict[str, Any]
    spend_today: float | None = None
    budgets: tuple[dict[str, Any], ...] = ()  # BudgetWatch.status: each budget's period
