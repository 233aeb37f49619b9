"""mlcost pricing: the GPU instance price catalog, cloud instance detection, live price refresh.

Imports neither `daemon` nor `mlcost_tui`. `pricing.refresh` (boto3) is imported on demand.
"""

from pricing.catalog import Catalog, InstanceOffer, Price, PricingError
from pricing.detect import Instance, detect

__all__ = ["Catalog", "Instance", "InstanceOffer", "Price", "PricingError", "detect"]
