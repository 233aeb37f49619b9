"""The GPU instance price catalog: bundled prices, overlaid with live prices from the cache.

A price is always the host's price per hour; the price of one accelerator is the host price
divided by the accelerator count (a GPU host is bought for its GPUs).
"""

from __future__ import annotations

import csv
import functools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from pricing.cache import CachedPrice, read_cache
from pricing.offer import (
    LIFECYCLES,
    InstanceOffer,
    Lifecycle,
    Price,
    nominal_gib,
    normalize_instance_type,
)
from pricing.small_file import read_small_file

if TYPE_CHECKING:
    from pricing.sanity import Rejection

PROVIDERS = ("aws", "gcp", "azure", "lambda")
DATE_UNKNOWN = "catalog, date unknown"
# How a catalog row states its price: per host hour (clouds), or per GPU hour with the GPU's
# share of vCPU, RAM and local disk included (CoreWeave-style); the offer holds host $/h either way.
PRICE_UNITS = ("host-hour", "gpu-hour")
# A row's status: "current", "pre-cut" (predates a known price cut), or "estimate".
ROW_STATUSES = ("current", "pre-cut", "estimate")
BUNDLED_CATALOG = Path(__file__).resolve().parent / "data" / "catalog.csv"
MAX_CATALOG_BYTES = 64 << 20  # a catalog CSV ([pricing].extra_catalogs): the bundled one is 11 kB


class PricingError(LookupError):
    """A price or instance the caller asked for is not known; the message says what is."""


_VENDOR_WORDS = ("NVIDIA", "TESLA")


def catalog_accelerator(gpu_name: str) -> str:
    """The catalog's name for a GPU as NVML names it: 'NVIDIA A100-SXM4-40GB' -> 'A100-40GB',
    'NVIDIA A100 80GB PCIe' -> 'A100-80GB', 'NVIDIA H100 80GB HBM3' -> 'H100', 'Tesla T4' ->
    'T4', 'NVIDIA A10G' -> 'A10G'. The catalog tells GPUs apart by model (and, for the A100,
    by memory); a name it cannot read comes back as its first word, upper-cased."""
    words = [w for w in re.split(r"[\s_-]+", gpu_name.strip().upper()) if w]
    while words and words[0] in _VENDOR_WORDS:
        words.pop(0)
    if not words:
        return gpu_name.strip()
    model = words[0]
    if model == "A100":
        memory = next((w for w in words[1:] if w in ("40GB", "80GB")), "")
        return f"A100-{memory}" if memory else "A100"
    return model


def _float(text: str) -> float | None:
    text = text.strip()
    return float(text) if text else None


def _parse_date(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None  # "catalog, date unknown" and the like
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _row_to_offer(row: dict[str, str], where: str = "catalog") -> InstanceOffer:
    as_of = _parse_date(row["as_of"])
    source = row["source"]
    status = (row.get("status") or "current").strip() or "current"
    if status not in ROW_STATUSES:
        raise ValueError(f"{where}: status {status!r} of {row['instance_type']}; use one of "
                         f"{', '.join(ROW_STATUSES)}")
    unit = (row.get("price_unit") or "host-hour").strip() or "host-hour"
    if unit not in PRICE_UNITS:
        raise ValueError(f"{where}: price_unit {unit!r} of {row['instance_type']}; use one of "
                         f"{', '.join(PRICE_UNITS)}")
    count = int(row["accelerator_count"])
    # Per-GPU-hour rows (CoreWeave-style: CPU and RAM included) become host $/h here.
    factor = count if unit == "gpu-hour" else 1
    note = (row.get("note") or "").strip()
    if unit == "gpu-hour":
        note = "; ".join(filter(None, [note, f"priced per GPU-hour x {count} GPU(s), "
                                             "host vCPU and RAM included"]))

    def bundled(kind: Lifecycle, value: float | None, low: float | None = None,
                high: float | None = None) -> Price | None:
        if value is None:
            return None
        def scale(v: float | None) -> float | None:
            return None if v is None else round(v * factor, 6)

        return Price(round(value * factor, 6), kind, source, as_of, live=False, low=scale(low),
                     high=scale(high), status=status, note=note)

    spot_low, spot_high = _float(row["spot_low"]), _float(row["spot_high"])
    if spot_low is not None and spot_high is None:
        spot_high = spot_low
    spot_mid = None if spot_low is None else round((spot_low + spot_high) / 2, 6)  # type: ignore[operator]
    return InstanceOffer(
        provider=row["provider"].strip().lower(),
        region=row["region"].strip(),
        instance_type=row["instance_type"].strip(),
        accelerator=row["accelerator"].strip(),
        accelerator_count=count,
        accelerator_memory_gib=float(row["accelerator_memory_gib"]),
        vcpus=int(row["vcpus"]) if row["vcpus"].strip() else None,
        memory_gib=_float(row["memory_gib"]),
        on_demand=bundled("on-demand", _float(row["on_demand"])),
        spot=bundled("spot", spot_mid, spot_low, spot_high),
        commit_1y=bundled("commit-1y", _float(row.get("commit_1y") or "")),
        commit_3y=bundled("commit-3y", _float(row.get("commit_3y") or "")),
        price_unit=unit,
    )


def load_offers_csv(path: str | os.PathLike[str]) -> list[InstanceOffer]:
    """The offers of a catalog CSV in the bundled format (pricing/data/catalog.csv's header;
    `price_unit`, `commit_3y`, `status` and `note` may be absent), in file order."""
    text = read_small_file(path, MAX_CATALOG_BYTES).decode("utf-8")
    return [_row_to_offer(row, str(path)) for row in csv.DictReader(text.splitlines())]


def load_bundled_offers() -> list[InstanceOffer]:
    """The offers of the packaged catalog.csv, in file order."""
    # Next to this module (not importlib.resources: a stale editable install can make `pricing`
    # a namespace package, which resources cannot read from).
    return load_offers_csv(BUNDLED_CATALOG)


def _live_price(cached: CachedPrice) -> Price:
    kind: Lifecycle = cached.kind if cached.kind in LIFECYCLES else "on-demand"  # type: ignore[assignment]
    return Price(
        per_hour=cached.per_hour,
        kind=kind,
        source=cached.source,
        as_of=datetime.fromtimestamp(cached.fetched_at, tz=timezone.utc),
        live=True,
        low=cached.low,
        high=cached.high,
        url=cached.url,
    )


def _gib(text: str | None) -> float | None:
    """'16 GiB' -> 16.0; None for 'NA' or anything unparseable."""
    if not text:
        return None
    try:
        return float(text.replace(",", "").split()[0])
    except (ValueError, IndexError):
        return None


def overlay_live(offers: Sequence[InstanceOffer], cached: Iterable[CachedPrice]) -> list[InstanceOffer]:
    """Replace bundled prices by cached live ones; add offers for regions/types only seen live."""
    by_key = {offer.key: offer for offer in offers}
    order = [offer.key for offer in offers]
    hardware = {(o.provider, normalize_instance_type(o.instance_type)): o for o in offers}
    for price in cached:
        if price.kind not in LIFECYCLES:
            continue  # managed-platform and low-priority prices: see pricing.managed, the cache
        key = (price.provider, price.region, normalize_instance_type(price.instance_type))
        offer = by_key.get(key)
        if offer is None:
            template = hardware.get((key[0], key[2]))
            if template is not None:
                # Same hardware in another region: bundled prices of that region don't apply.
                offer = replace(template, region=price.region, on_demand=None, spot=None,
                                commit_1y=None, commit_3y=None)
            else:
                gpus = _gib(price.attributes.get("gpu"))
                if not gpus:
                    continue  # not an accelerator instance we can describe
                offer = InstanceOffer(
                    provider=price.provider,
                    region=price.region,
                    instance_type=price.instance_type,
                    accelerator=price.attributes.get("gpuModel", "unknown"),
                    accelerator_count=int(gpus),
                    accelerator_memory_gib=nominal_gib(
                        (_gib(price.attributes.get("gpuMemory")) or 0.0) / int(gpus) * 1024),
                    vcpus=int(_gib(price.attributes.get("vcpu")) or 0) or None,
                    memory_gib=_gib(price.attributes.get("memory")),
                    on_demand=None,
                    spot=None,
                    commit_1y=None,
                )
            order.append(key)
        live = _live_price(price)
        offer = offer.with_price(live.kind, live)
        by_key[key] = offer
    return [by_key[key] for key in order]


class Catalog:
    """All known offers. Build with `Catalog.load()`; lookups are case-insensitive."""

    def __init__(self, offers: Sequence[InstanceOffer], rejections: Sequence[Rejection] = (),
                 *, checked: bool = False):
        """`offers` as given; unless `checked`, the sanity rules (pricing.sanity) run on them
        first and what they reject is in `rejections`."""
        if not checked:
            from pricing.sanity import check_offers

            offers, found = check_offers(offers)
            rejections = [*rejections, *found]
        self._offers = tuple(offers)
        self._rejections = tuple(rejections)

    @classmethod
    def load(cls, cache_path: str | os.PathLike[str] | None = None,
             extra_catalogs: Sequence[str | os.PathLike[str]] = ()) -> Catalog:
        """The bundled catalog plus `extra_catalogs` (CSV files in the bundled format, e.g. a
        CoreWeave price sheet), with live prices from `cache_path` overlaid when given, after
        the sanity rules (`rejections` lists what they left out).

        Cached per process; a changed cache file is re-read.
        """
        def stamp(path: str | os.PathLike[str]) -> tuple[str, int]:
            try:
                return str(path), Path(path).stat().st_mtime_ns
            except OSError:
                return str(path), -1

        extra = tuple(stamp(p) for p in extra_catalogs)
        if cache_path is None:
            return _load_cached(None, 0, extra)
        return _load_cached(*stamp(cache_path), extra)

    def with_texts(self, clean: Callable[[str], str]) -> Catalog:
        """This catalog with each price's source, note and URL passed through `clean` (the
        daemon's redaction: an extra catalog's source or a price cache's URL may carry a token,
        `?api_key=...`, and each is shown in /v1/now, /metrics, the store and reports); the
        offers are otherwise the same, and not checked again."""
        def text(price: Price | None) -> Price | None:
            if price is None:
                return None
            return replace(price, source=clean(price.source), note=clean(price.note),
                           url=clean(price.url))

        return Catalog([replace(o, on_demand=text(o.on_demand), spot=text(o.spot),
                                commit_1y=text(o.commit_1y), commit_3y=text(o.commit_3y))
                        for o in self._offers], self._rejections, checked=True)

    @property
    def rejections(self) -> tuple[Rejection, ...]:
        """Rows and prices the sanity rules left out, each with its reason."""
        return self._rejections

    @property
    def offers(self) -> tuple[InstanceOffer, ...]:
        return self._offers

    def __len__(self) -> int:
        return len(self._offers)

    def __iter__(self):
        return iter(self._offers)

    def providers(self) -> list[str]:
        return sorted({o.provider for o in self._offers})

    def by_instance(
        self, provider: str, instance_type: str, region: str | None = None
    ) -> InstanceOffer | None:
        """The offer for this instance type; with `region`, only that region's offer.

        Without a region, the first listed (the catalog's reference region) is returned.
        """
        provider_key = provider.strip().lower()
        type_key = normalize_instance_type(instance_type)
        for offer in self._offers:
            if offer.provider != provider_key or normalize_instance_type(offer.instance_type) != type_key:
                continue
            if region is None or offer.region.lower() == region.strip().lower():
                return offer
        return None

    def require_instance(
        self, provider: str, instance_type: str, region: str | None = None
    ) -> InstanceOffer:
        """Like `by_instance`, but raises PricingError naming what is known."""
        offer = self.by_instance(provider, instance_type, region)
        if offer is not None:
            return offer
        raise PricingError(self.explain_missing(provider, instance_type, region))

    def explain_missing(self, provider: str, instance_type: str, region: str | None = None) -> str:
        provider_key = provider.strip().lower()
        if provider_key not in self.providers():
            return (f"no prices for provider {provider!r}; known providers: "
                    f"{', '.join(self.providers())}")
        same_type = [o for o in self._offers if o.provider == provider_key
                     and normalize_instance_type(o.instance_type) == normalize_instance_type(instance_type)]
        if same_type and region is not None:
            regions = sorted({o.region for o in same_type})
            return (f"no price for {provider_key}/{instance_type} in {region}; "
                    f"known in: {', '.join(regions)} (refresh live prices for {region}, or set "
                    "the price in the config)")
        types = sorted({o.instance_type for o in self._offers if o.provider == provider_key})
        return (f"no price for {provider_key}/{instance_type}; known {provider_key.upper()} GPU "
                f"types: {', '.join(types)}")

    def by_accelerator(self, name: str) -> list[InstanceOffer]:
        """Offers with this accelerator: exact name (case-insensitive), else every name that
        starts with it ('A100' finds A100-40GB and A100-80GB); a name as NVML and the screen
        show it ('NVIDIA A100-SXM4-40GB', 'A100-SXM4-40GB') is read as its catalog name."""
        for wanted in dict.fromkeys((name.strip().lower(), catalog_accelerator(name).lower())):
            exact = [o for o in self._offers if o.accelerator.lower() == wanted]
            if exact:
                return exact
            prefixed = [o for o in self._offers if o.accelerator.lower().startswith(wanted)]
            if prefixed:
                return prefixed
        return []

    def accelerators(self) -> list[str]:
        return sorted({o.accelerator for o in self._offers})

    def filter(
        self,
        provider: str | None = None,
        accelerator: str | None = None,
        region: str | None = None,
        instance_types: Sequence[str] | None = None,
    ) -> list[InstanceOffer]:
        """Offers matching every given criterion (case-insensitive)."""
        offers = self.by_accelerator(accelerator) if accelerator else list(self._offers)
        if provider:
            offers = [o for o in offers if o.provider == provider.strip().lower()]
        if region:
            offers = [o for o in offers if o.region.lower() == region.strip().lower()]
        if instance_types:
            wanted = {normalize_instance_type(t) for t in instance_types}
            offers = [o for o in offers if normalize_instance_type(o.instance_type) in wanted]
        return offers

    def cheapest_fitting(
        self,
        gpu_memory_gib: float,
        gpu_count: int = 1,
        provider: str | None = None,
        region: str | None = None,
        spot: bool = False,
        headroom: float = 0.1,
        limit: int = 10,
        gpus_only: bool = True,
    ) -> list[InstanceOffer]:
        """Offers whose per-accelerator memory holds `gpu_memory_gib` × (1 + headroom) and that
        have at least `gpu_count` accelerators, cheapest host price first (spot or on-demand).

        Offers without the chosen price are left out; `gpus_only` leaves out Inferentia,
        Trainium and TPU, which a CUDA workload cannot simply move to.
        """
        if gpu_memory_gib < 0 or gpu_count < 1 or headroom < 0:
            raise ValueError("gpu_memory_gib and headroom must be >= 0 and gpu_count >= 1")
        need = gpu_memory_gib * (1 + headroom)
        lifecycle = "spot" if spot else "on-demand"
        fitting = []
        for offer in self.filter(provider=provider, region=region):
            price = offer.price(lifecycle)
            if price is None or (gpus_only and not offer.is_gpu):
                continue
            if offer.accelerator_memory_gib + 1e-9 >= need and offer.accelerator_count >= gpu_count:
                fitting.append((price.per_hour, offer.accelerator_count, offer.instance_type, offer))
        fitting.sort(key=lambda item: item[:3])
        return [item[3] for item in fitting[:limit]]


@functools.lru_cache(maxsize=8)
def _load_cached(cache_path: str | None, mtime_ns: int,
                 extra: tuple[tuple[str, int], ...] = ()) -> Catalog:
    offers = load_bundled_offers()
    for path, _ in extra:
        offers.extend(load_offers_csv(path))
    if cache_path is not None:
        offers = overlay_live(offers, read_cache(cache_path))
    return Catalog(offers)


def clear_catalog_cache() -> None:
    """Forget loaded catalogs (tests)."""
    _load_cached.cache_clear()
