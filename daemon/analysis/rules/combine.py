"""Savings that add up: one host's recommendations combined so that no set of them claims more
than the host's bill.

Each recommendation says what it frees (its scope, `savings_scope` on the wire): the GPUs it
frees whole (an idle GPU released, the GPUs a smaller instance drops), the GPUs whose cost it
lowers by a fraction (a job made faster, a job's GPUs on spot or on a commitment), or the whole
host. Every GPU starts at its part of the monthly bill (host price / GPU count x 730 h); the
recommendations are applied in the stated order (ORDER) to what the earlier ones left, and
each one's combined figure is its standalone figure scaled to what is left of the GPUs it
concerns. So each GPU gives up at most what it costs and the combined figures never sum past
the bill. This works on wire documents, so the live daemon, replay and the report combine the
same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pricing.offer import HOURS_PER_MONTH

# The stated order: stop what idles, then right-size, then make the jobs efficient, then buy
# what is left more cheaply (the FinOps order: eliminate, rightsize, then purchase options).
STOP_HOST, RELEASE_GPU, SHRINK, EFFICIENCY, SPOT, COMMITMENT, NO_SAVINGS = range(1, 8)
STAGE_OF_RULE: dict[str, int] = {
    "host_idle": STOP_HOST,
    "idle_gpu_held": RELEASE_GPU,
    "idle_server": RELEASE_GPU,
    "over_provisioned": SHRINK,
    "spot_training": SPOT,
    "steady_inference_commitment": COMMITMENT,
    "budget_exceeded": NO_SAVINGS,
}  # every other rule (a phase, storage, batching) makes a job efficient: EFFICIENCY
ORDER = ("stop an idle host, release idle GPUs, shrink the instance, fix the jobs' bottlenecks, "
         "spot, commitments; each counts only what the ones before it left")


@dataclass(frozen=True)
class Combined:
    """One recommendation's place in the order and its share after the ones before it."""

    id: str
    order: int  # 1-based position in the order
    combined_per_month: float


def bill_per_month(price_per_hour: float | None) -> float:
    return max(price_per_hour or 0.0, 0.0) * HOURS_PER_MONTH


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list | tuple):
        return []
    return [int(v) for v in value if isinstance(v, int | float) and not isinstance(v, bool)]


def _standalone(rec: Mapping[str, Any]) -> float:
    value = rec.get("savings_per_month")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return max(float(value), 0.0)


def combine(recommendations: Iterable[Mapping[str, Any]], bill: float,
            gpus: Sequence[int]) -> dict[str, Combined]:
    """Each recommendation's combined savings (by id) on a host billing `bill` $/month with
    these GPU indices; see the module docstring for the order and the method."""
    recs = sorted(recommendations, key=lambda r: (
        STAGE_OF_RULE.get(str(r.get("rule")), EFFICIENCY), -_standalone(r), str(r.get("id"))))
    buckets = sorted(set(gpus)) or [-1]  # no GPU known: the host is one bucket
    each = bill / len(buckets) if bill > 0 else 0.0
    left = {g: each for g in buckets}
    out: dict[str, Combined] = {}
    for order, rec in enumerate(recs, start=1):
        scope = rec.get("savings_scope")
        scope = scope if isinstance(scope, Mapping) else {}
        frees = [g for g in dict.fromkeys(_ints(scope.get("frees"))) if g in left]
        lowers = [g for g in dict.fromkeys(_ints(scope.get("gpus")))
                  if g in left and g not in frees]
        if scope.get("whole_host") or not (frees or lowers):
            frees, lowers = [], [g for g in buckets]
        standalone = _standalone(rec)
        combined = 0.0
        # What it frees whole comes first, then the rest of its figure from what it lowers.
        freed_cost = each * len(frees)
        from_freed = min(standalone, freed_cost)
        for group, part in ((frees, from_freed), (lowers, standalone - from_freed)):
            cost = each * len(group)
            if not group or cost <= 0 or part <= 0:
                continue
            fraction = min(part / cost, 1.0)
            for g in group:
                taken = left[g] * fraction
                left[g] -= taken
                combined += taken
        out[str(rec.get("id"))] = Combined(str(rec.get("id")), order, combined)
    return out


def potential_savings(combined: Mapping[str, Combined]) -> float:
    """The host's one "potential savings" figure: the combined figures summed (<= the bill)."""
    return sum(c.combined_per_month for c in combined.values())


def savings_document(recommendations: list[dict[str, Any]], price_per_hour: float | None,
                     gpus: list[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The recommendations with their combined savings over exactly this set (those shown, after
    snoozes, or those a report lists), and the host's `savings` document: the potential
    (combined) figure next to the bill, the standalone sum, the order, how many are preliminary."""
    bill = bill_per_month(price_per_hour)
    combined = combine(recommendations, bill, gpus)
    recs = []
    for rec in recommendations:
        share = combined.get(str(rec.get("id")))
        recs.append(dict(rec, combined_savings_per_month=share.combined_per_month if share
                         else None, savings_order=share.order if share else None))
    standalone = sum(float(r.get("savings_per_month") or 0.0) for r in recommendations)
    return recs, {"potential_per_month": potential_savings(combined),
                  "standalone_sum_per_month": standalone, "bill_per_month": bill,
                  "order": ORDER,
                  "preliminary": sum(1 for r in recommendations if r.get("preliminary")),
                  "thresholds_shortened": any(r.get("thresholds_shortened")
                                              for r in recommendations)}
