"""`/metrics` families for energy and carbon (daemon.analysis.energy), beside the GPU counters.

- `mlcost_energy_joules_total{job_name,namespace}`: the GPUs' energy since mlcostd started,
  apportioned to the workloads that drew it (the cost ledger's job label and the Kubernetes
  namespace); the GPUs no process holds are the series `job_name="__idle__"` (OpenCost's name
  for what nobody holds). Per host the series sum to `mlcost_gpu_energy_joules_total`.
- `mlcost_energy_co2e_grams_total{job_name,namespace}`: the same energy in grams CO2e at the
  grid intensity in use; absent while it is unknown.
- `mlcost_grid_intensity_grams_per_kwh{Hostname,source}`: that intensity (config, or the
  region's annual average from pricing/data/grid_intensity.csv); absent while unknown.

Label values are bounded by the workload series' caps (`[api].metrics_label_values` per label,
the rest folded into `other` and summed), so there are at most (jobs x namespaces) + 1 series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import Metric

from pricing.grid import GridIntensity

IDLE_JOB = "__idle__"
Bound = Callable[[str, str], str]  # (label, raw value) -> the value shown ("" leaves it out)


def energy_families(by_workload: Mapping[tuple[str, str], float], host_idle_joules: float,
                    grid: GridIntensity, hostname: str, bound: Bound) -> Iterator[Metric]:
    """The three families of one scrape. `by_workload`: joules per (job, namespace)."""
    joules: dict[tuple[tuple[str, str], ...], float] = {}
    for (job, namespace), value in by_workload.items():
        key = tuple((label, shown) for label, raw in (("job_name", job), ("namespace", namespace))
                    if (shown := bound(label, raw)))
        joules[key] = joules.get(key, 0.0) + value
    idle_key = (("job_name", IDLE_JOB),)
    joules[idle_key] = joules.get(idle_key, 0.0) + host_idle_joules
    energy = Metric("mlcost_energy_joules", "GPU energy since mlcostd started, apportioned to the "
                    "workloads that drew it (above the idle floor by SM share, the floor by "
                    "memory held); job_name=\"__idle__\": GPUs no process holds", "counter")
    carbon = Metric("mlcost_energy_co2e_grams", "That energy in grams CO2e at the grid "
                    "intensity in use (mlcost_grid_intensity_grams_per_kwh)", "counter")
    intensity = Metric("mlcost_grid_intensity_grams_per_kwh", "Grams CO2e per kWh of this "
                       "host's electricity: [energy] config, else the cloud region's annual "
                       "average (a sourced table); absent when unknown", "gauge")
    for key, value in joules.items():
        energy.add_sample("mlcost_energy_joules_total", dict(key), value)
        grams = grid.grams(value)
        if grams is not None:
            carbon.add_sample("mlcost_energy_co2e_grams_total", dict(key), grams)
    if grid.g_per_kwh is not None:
        source = "config" if grid.source.startswith("config") else "table"
        intensity.add_sample(intensity.name, {"Hostname": hostname, "source": source},
                             grid.g_per_kwh)
    yield from (energy, carbon, intensity)
