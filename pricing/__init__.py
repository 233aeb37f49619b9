"""mlcost pricing: the GPU instance price catalog, cloud instance detection, live price refresh,
sanity rules, staleness, managed-platform and off-cloud prices.

Imports neither `daemon` nor `mlcost_tui`. The refreshers (`pricing.refresh` for AWS through
boto3; `refresh_azure`, `refresh_catalog`, `refresh_gcp` through aiohttp) and `pricing.managed`
are imported on demand. The names below are loaded when first asked for (PEP 562), so a client
that needs only `pricing.http` or `pricing.key_file` (mlcost-top's, through daemon.client: its
--token-file is read as a cloud API key file is) does not load the catalog.
`detect` is not among them: `pricing.detect` is also the module's name, and once the module is
imported the package attribute is the module; import it as `from pricing.detect import detect`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pricing.catalog import Catalog, InstanceOffer, Price, PricingError
    from pricing.detect import Instance
    from pricing.offcloud import OffCloudPrice, off_cloud_price
    from pricing.sanity import Rejection
    from pricing.staleness import (
        STALE_AFTER_DAYS,
        Staleness,
        price_staleness,
        refresh_command,
    )

_MODULE_OF = {
    "Catalog": "pricing.catalog", "InstanceOffer": "pricing.catalog", "Price": "pricing.catalog",
    "PricingError": "pricing.catalog", "Instance": "pricing.detect",
    "OffCloudPrice": "pricing.offcloud", "off_cloud_price": "pricing.offcloud",
    "Rejection": "pricing.sanity", "STALE_AFTER_DAYS": "pricing.staleness",
    "Staleness": "pricing.staleness", "price_staleness": "pricing.staleness",
    "refresh_command": "pricing.staleness",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'pricing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once
    return value


__all__ = ["STALE_AFTER_DAYS", "Catalog", "Instance", "InstanceOffer", "OffCloudPrice", "Price",
           "PricingError", "Rejection", "Staleness", "off_cloud_price",
           "price_staleness", "refresh_command"]
