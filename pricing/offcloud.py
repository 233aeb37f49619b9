"""The price per hour of a host no cloud bills: bought, hosted and powered by its owner.

Pure functions; the daemon's `[instance]` config gives the inputs and the measured GPU power.
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing.offer import HOURS_PER_MONTH, HOURS_PER_YEAR


@dataclass(frozen=True)
class OffCloudPrice:
    """Host $/h and its parts; `method` says how it was computed, for the API's inputs."""

    per_hour: float
    per_gpu_hour: float
    capital_per_hour: float  # purchase / (years x 8760 h), or price_per_gpu_hour x GPUs
    hosting_per_hour: float  # hosting per month / 730 h
    energy_per_hour: float  # $/kWh x measured kW (0 when not configured)
    method: str


def energy_per_hour(watts: float, per_kwh: float) -> float:
    """$/h of drawing `watts` at `per_kwh` $/kWh."""
    if watts < 0 or per_kwh < 0:
        raise ValueError(f"watts ({watts:g}) and $/kWh ({per_kwh:g}) must be >= 0")
    return watts / 1000.0 * per_kwh


def off_cloud_price(gpu_count: int, *, price_per_gpu_hour: float | None = None,
                    purchase_price: float | None = None, years: float | None = None,
                    hosting_per_month: float = 0.0, electricity_per_kwh: float | None = None,
                    measured_watts: float = 0.0) -> OffCloudPrice:
    """Host $/h from `price_per_gpu_hour` x `gpu_count`, or from an amortization
    (`purchase_price` over `years`, plus `hosting_per_month`); with `electricity_per_kwh`,
    plus the energy of `measured_watts` (the GPUs' measured power). Raises ValueError naming
    the bad input."""
    if gpu_count < 1:
        raise ValueError(f"gpu_count must be >= 1, not {gpu_count}")
    if (price_per_gpu_hour is None) == (purchase_price is None):
        raise ValueError("give either price_per_gpu_hour or purchase_price (with years), "
                         "not both and not neither")
    if hosting_per_month < 0:
        raise ValueError(f"hosting_per_month must be >= 0, not {hosting_per_month:g}")
    hosting = hosting_per_month / HOURS_PER_MONTH
    if price_per_gpu_hour is not None:
        if price_per_gpu_hour <= 0:
            raise ValueError(f"price_per_gpu_hour must be > 0, not {price_per_gpu_hour:g}")
        capital = price_per_gpu_hour * gpu_count
        method = f"{price_per_gpu_hour:g} $/GPU-h x {gpu_count} GPU(s)"
    else:
        assert purchase_price is not None
        if purchase_price <= 0 or years is None or years <= 0:
            raise ValueError(f"an amortization needs purchase_price > 0 and years > 0 (got "
                             f"{purchase_price:g} and {years})")
        capital = purchase_price / (years * HOURS_PER_YEAR)
        method = f"{purchase_price:g} $ over {years:g} years"
    if hosting:
        method += f" + hosting {hosting_per_month:g} $/month"
    energy = 0.0
    if electricity_per_kwh is not None:
        energy = energy_per_hour(measured_watts, electricity_per_kwh)
        method += f" + {measured_watts:g} W at {electricity_per_kwh:g} $/kWh"
    total = capital + hosting + energy
    return OffCloudPrice(total, total / gpu_count, capital, hosting, energy, method)


def gpus_energy_per_hour(watts_by_gpu: dict[int, float | None],
                         per_kwh: float) -> tuple[dict[int, float], float]:
    """({GPU index: energy $/h}, host total) of the GPUs' measured power at `per_kwh` $/kWh;
    a GPU without a power reading is left out (its energy is unknown, not zero)."""
    by_gpu = {index: energy_per_hour(watts, per_kwh)
              for index, watts in watts_by_gpu.items() if watts is not None and watts >= 0}
    return by_gpu, sum(by_gpu.values())
