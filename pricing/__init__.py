"""mlcost pricing: the GPU instance price catalog, cloud instance detection, live price refresh,
sanity rules, staleness, managed-platform and off-cloud prices.

Imports neither `daemon` nor `mlcost_tui`. The refreshers (`pricing.refresh` for AWS through
boto3; `refresh_azure`, `refresh_catalog`, `refresh_gcp` through aiohttp) and `pricing.managed`
are imported on demand.
"""

from pricing.catalog import Catalog, InstanceOffer, Price, PricingError
from pricing.detect import Instance, detect
from pricing.offcloud import OffCloudPrice, off_cloud_price
from pricing.sanity import Rejection
from pricing.staleness import STALE_AFTER_DAYS, Staleness, price_staleness, refresh_command

__all__ = ["STALE_AFTER_DAYS", "Catalog", "Instance", "InstanceOffer", "OffCloudPrice", "Price",
           "PricingError", "Rejection", "Staleness", "detect", "off_cloud_price",
           "price_staleness", "refresh_command"]
