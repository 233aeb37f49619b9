"""Checks across the keys of one section, where each value is fine alone but two together are
not: one way to set the grid intensity, one way to price the host, catalogs that parse.
ValueError names the keys, the values and the fix; the loader adds the file.
"""

from __future__ import annotations

from daemon.config.sections import EnergyConfig, InstanceConfig, PricingConfig
from daemon.config.values import check_http_url
from pricing.grid import find_region, grid_table
from pricing.small_file import SmallFileError


def check_energy(energy: EnergyConfig) -> None:
    """One grid intensity: a figure or a region, and a region the table knows. ValueError
    names the key, the value and the fix."""
    region = energy.region.strip()
    if energy.grid_intensity_g_per_kwh > 0 and region:
        raise ValueError(f"[energy].grid_intensity_g_per_kwh = "
                         f"{energy.grid_intensity_g_per_kwh:g} and [energy].region = "
                         f"{region[:64]!r} are two ways to set the grid intensity; keep one")
    if region and find_region(region) is None:
        known = sorted({r for _, r in grid_table()})
        raise ValueError(f"[energy].region = {region[:64]!r} is not in the grid table "
                         f"(pricing/data/grid_intensity.csv, {len(known)} regions, e.g. "
                         f"{', '.join(known[:6])}); set [energy].grid_intensity_g_per_kwh "
                         "to your grid's figure instead")


def check_instance_price(instance: InstanceConfig) -> None:
    """One way to price the host: price_per_hour, price_per_gpu_hour, or purchase_price with
    amortization_years; hosting only with an off-cloud price. ValueError names the keys."""
    set_prices = [name for name in ("price_per_hour", "price_per_gpu_hour", "purchase_price")
                  if getattr(instance, name) > 0]
    if len(set_prices) > 1:
        values = ", ".join(f"[instance].{name} = {getattr(instance, name):g}"
                           for name in set_prices)
        raise ValueError(f"{values}: these are exclusive ways to price the host; keep one "
                         "(price_per_hour for the whole host, price_per_gpu_hour per GPU, or "
                         "purchase_price with amortization_years)")
    if instance.purchase_price > 0 and instance.amortization_years <= 0:
        raise ValueError(f"[instance].purchase_price = {instance.purchase_price:g} needs "
                         "[instance].amortization_years > 0 (the years it is written off over, "
                         "e.g. 4)")
    if instance.amortization_years > 0 and instance.purchase_price <= 0:
        raise ValueError(f"[instance].amortization_years = {instance.amortization_years:g} "
                         "amortizes nothing: set [instance].purchase_price too")
    if instance.hosting_per_month > 0 and not (instance.purchase_price > 0
                                               or instance.price_per_gpu_hour > 0):
        raise ValueError(f"[instance].hosting_per_month = {instance.hosting_per_month:g} adds to "
                         "an off-cloud price: set [instance].purchase_price (with "
                         "amortization_years) or [instance].price_per_gpu_hour")


def check_pricing(pricing: PricingConfig) -> None:
    """[pricing]: an http(s) catalog_url, and extra catalogs that exist and parse."""
    if pricing.catalog_url:
        check_http_url("[pricing].catalog_url", pricing.catalog_url,
                       "a folder holding <cloud>/vms.csv")
    from pricing.catalog import load_offers_csv

    for path in pricing.extra_catalogs:
        try:
            load_offers_csv(path)
        except SmallFileError as exc:  # missing, unreadable, a FIFO, a device, a folder...
            raise ValueError(f"[pricing].extra_catalogs: {path!r}{exc}; fix the path or "
                             "remove it") from None
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"[pricing].extra_catalogs: {path!r} is not a catalog CSV ({exc}); "
                             "use the header of pricing/data/catalog.csv") from None
