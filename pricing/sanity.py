"""Sanity rules every price passes before anyone sees it, bundled or refreshed.

A catalog is assembled from sources with known traps (placeholder prices, spot equal to
on-demand, a GPU row priced for the wrong count). Each rule here either drops one price (spot,
a commitment) or leaves a whole row out, and records why in a `Rejection`; `mlcostd prices
--audit` lists them. Rules:

- no zero or negative price (a row without a usable on-demand price keeps its other prices
  only if they pass);
- spot below on-demand, else spot unknown (sources use on-demand as a placeholder);
- a commitment below on-demand, else that commitment unknown;
- a per-GPU-hour on-demand price inside the plausible band of its accelerator (PER_GPU_HOUR_BANDS);
- a sibling with more or bigger GPUs (and no less CPU and RAM) not cheaper on demand than the
  smaller one in the same provider and region: the cheaper big row is left out;
- rows known to be wrong in a source (KNOWN_BAD_ROWS).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pricing.offer import InstanceOffer

# Plausible on-demand $ per accelerator-hour, (low, high). Reasoning: the low end sits below the
# cheapest public list price we know for that accelerator (neoclouds such as Lambda) by ~30 %,
# the high end above the most expensive one (a 1-GPU host with a large CPU share, or AWS before
# the June 2025 cuts) by ~25 %. Outside the band a row is a placeholder (GCP's 700.0), a wrong
# GPU count or a unit error (a monthly or per-term price read as hourly). See
# shared/reference/gpu-prices.md for the figures the bands bracket.
PER_GPU_HOUR_BANDS: dict[str, tuple[float, float]] = {
    "H200": (2.0, 16.0),        # p5en 63.296/8 = 7.91; GCP a3-ultragpu 10.85
    "H100": (1.5, 16.0),        # Lambda PCIe 2.49; p5 pre-cut 98.32/8 = 12.29
    "A100-80GB": (0.9, 8.0),    # Lambda 14.32/8 = 1.79; p4de pre-cut 5.12; GCP ~5
    "A100-40GB": (0.8, 6.0),    # Lambda 10.32/8 = 1.29; GCP a2-highgpu-1g 3.67; p4d 4.10
    "A100": (0.8, 8.0),         # unspecified memory: both of the above
    "L40S": (0.5, 9.5),         # g6e.xlarge 1.86 .. g6e.16xlarge 7.58 (1 GPU, 64 vCPU)
    "A10G": (0.3, 4.0),         # g5.xlarge 1.006 .. g5.8xlarge 2.448
    "A10": (0.3, 5.0),          # Lambda 0.75 .. Azure NV36ads 3.20
    "L4": (0.25, 4.5),          # g2-standard-4 0.71 .. g6.16xlarge 3.40
    "T4": (0.1, 5.5),           # g4dn.12xlarge 0.98 .. g4dn.16xlarge 4.35
    "V100": (0.5, 5.0),         # p3.8xlarge 3.06
    "Inferentia2": (0.1, 2.5),  # inf2.48xlarge 1.08 .. inf2.8xlarge 1.97 (1 chip, 32 vCPU)
    "Trainium": (0.4, 2.5),     # trn1.32xlarge 1.34 .. trn1n 1.55
    "Trainium2": (2.0, 8.0),    # trn2.48xlarge 85.964/16 = 5.37
    "TPU-v6e": (1.0, 5.0),      # 2.70 per chip
    "TPU-v5p": (1.5, 8.0),      # 4.20 per chip
    "TPU-v5e": (0.5, 3.0),      # 1.20 per chip (us-central1)
}

# Rows a source is known to get wrong, by (provider, normalized instance type): left out.
KNOWN_BAD_ROWS: dict[tuple[str, str], str] = {
    ("azure", "nd96isr_h100_v5"): (
        "the SkyPilot Azure catalog lists 12 GPUs at 98.32 with spot = on-demand; the size has "
        "8 H100s and its price is unknown"),
    ("aws", "p5e.48xlarge"): "no on-demand price is listed (capacity blocks only)",
}


@dataclass(frozen=True)
class Rejection:
    """A price or a row a sanity rule left out, and why."""

    provider: str
    region: str
    instance_type: str
    kind: str  # the lifecycle dropped, or "row" when the whole row is left out
    per_hour: float | None
    rule: str  # "non-positive", "spot-not-below-on-demand", "band", "sibling", "known-bad", ...
    reason: str

    def describe(self) -> str:
        value = "" if self.per_hour is None else f" ${self.per_hour:g}/h"
        what = "row" if self.kind == "row" else f"{self.kind} price"
        return (f"{self.provider}/{self.region}/{self.instance_type}: {what}{value} left out "
                f"({self.rule}): {self.reason}")


def band_for(accelerator: str) -> tuple[float, float] | None:
    """The plausible on-demand $/accelerator-hour band, None for an accelerator we have none for."""
    if accelerator in PER_GPU_HOUR_BANDS:
        return PER_GPU_HOUR_BANDS[accelerator]
    lowered = {k.lower(): v for k, v in PER_GPU_HOUR_BANDS.items()}
    return lowered.get(accelerator.lower())


def _family(accelerator: str) -> str:
    return accelerator.split("-")[0].lower()


def check_offers(offers: Sequence[InstanceOffer]) -> tuple[list[InstanceOffer], list[Rejection]]:
    """(offers that pass, with failing spot/commitment prices removed; what was left out)."""
    from pricing.offer import normalize_instance_type

    kept: list[InstanceOffer] = []
    rejected: list[Rejection] = []

    def reject(o: InstanceOffer, kind: str, value: float | None, rule: str, reason: str) -> None:
        rejected.append(Rejection(o.provider, o.region, o.instance_type, kind, value, rule,
                                  reason))

    for offer in offers:
        known_bad = KNOWN_BAD_ROWS.get((offer.provider, normalize_instance_type(offer.instance_type)))
        if known_bad:
            reject(offer, "row", offer.on_demand.per_hour if offer.on_demand else None,
                   "known-bad", known_bad)
            continue
        on_demand = offer.on_demand
        if on_demand is not None and on_demand.per_hour <= 0:
            reject(offer, "on-demand", on_demand.per_hour, "non-positive",
                   "a price must be above zero; the source lists a placeholder")
            offer = offer.with_price("on-demand", None)
            on_demand = None
        if on_demand is not None and offer.accelerator_count > 0:
            band = band_for(offer.accelerator)
            per_gpu = on_demand.per_hour / offer.accelerator_count
            if band is not None and not band[0] <= per_gpu <= band[1]:
                reject(offer, "row", on_demand.per_hour, "band",
                       f"${per_gpu:.4g} per {offer.accelerator}-hour is outside the plausible "
                       f"band ${band[0]:g}-{band[1]:g} (a placeholder, a wrong GPU count or a "
                       "unit error)")
                continue
        for kind in ("spot", "commit-1y", "commit-3y"):
            price = offer.price(kind)
            if price is None:
                continue
            if price.per_hour <= 0:
                reject(offer, kind, price.per_hour, "non-positive",
                       f"a price must be above zero; {kind} unknown")
                offer = offer.with_price(kind, None)
            elif on_demand is not None and price.per_hour >= on_demand.per_hour:
                rule = "spot-not-below-on-demand" if kind == "spot" else "commitment-not-below-on-demand"
                reject(offer, kind, price.per_hour, rule,
                       f"{kind} ${price.per_hour:g}/h is not below on-demand "
                       f"${on_demand.per_hour:g}/h (a placeholder); {kind} unknown")
                offer = offer.with_price(kind, None)
        if offer.on_demand is None and offer.spot is None and not offer.commitments():
            if not any(r.instance_type == offer.instance_type and r.region == offer.region
                       for r in rejected):
                kept.append(offer)  # a live region without prices yet: nothing to judge
            continue
        kept.append(offer)
    return _check_siblings(kept, rejected)


def _dominates(big: InstanceOffer, small: InstanceOffer) -> bool:
    """`big` has at least the GPUs, GPU memory, vCPUs and RAM of `small`, and more of some."""
    pairs = [(big.accelerator_count, small.accelerator_count),
             (big.accelerator_memory_gib, small.accelerator_memory_gib),
             (big.vcpus or 0, small.vcpus or 0), (big.memory_gib or 0, small.memory_gib or 0)]
    at_least = all(b >= s for b, s in pairs)
    more_gpu = (big.accelerator_count > small.accelerator_count
                or big.accelerator_memory_gib > small.accelerator_memory_gib)
    return at_least and more_gpu


def _check_siblings(offers: list[InstanceOffer],
                    rejected: list[Rejection]) -> tuple[list[InstanceOffer], list[Rejection]]:
    # On-demand only: spot markets invert legitimately from zone to zone.
    # Siblings share provider, region and accelerator family: compare within those groups only
    # (a refreshed catalog holds thousands of offers).
    groups: dict[tuple[str, str, str], list[InstanceOffer]] = {}
    for offer in offers:
        if offer.on_demand is not None:
            groups.setdefault((offer.provider, offer.region, _family(offer.accelerator)),
                              []).append(offer)
    out = []
    for offer in offers:
        cheaper_smaller = None
        if offer.on_demand is not None:
            group = groups[(offer.provider, offer.region, _family(offer.accelerator))]
            for other in group:
                if other is offer or other.on_demand is None:
                    continue
                if _dominates(offer, other) and offer.on_demand.per_hour < other.on_demand.per_hour:
                    cheaper_smaller = other
                    break
        if cheaper_smaller is None:
            out.append(offer)
            continue
        small = cheaper_smaller
        assert offer.on_demand is not None and small.on_demand is not None
        rejected.append(Rejection(
            offer.provider, offer.region, offer.instance_type, "row", offer.on_demand.per_hour,
            "sibling",
            f"{offer.accelerator_count} x {offer.accelerator} at ${offer.on_demand.per_hour:g}/h "
            f"is cheaper than {small.instance_type} ({small.accelerator_count} x "
            f"{small.accelerator}, no more CPU or RAM) at ${small.on_demand.per_hour:g}/h; "
            "the bigger host's price is suspect"))
    return out, rejected
