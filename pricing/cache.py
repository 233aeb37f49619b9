"""The live-price cache: a small JSON file of prices fetched from a cloud API, with fetch times.

`refresh` writes it, `catalog` overlays it on the bundled catalog. Writes are atomic (temp file +
rename) so a reader never sees half a file; a missing or unreadable file reads as empty.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

CACHE_VERSION = 1
CACHE_ENV = "MLCOST_PRICE_CACHE"


@dataclass(frozen=True)
class CachedPrice:
    """One live price as fetched: host $/h (spot: low/high across availability zones)."""

    provider: str
    region: str
    instance_type: str
    kind: str  # "on-demand" | "spot"
    per_hour: float
    fetched_at: float  # unix seconds
    source: str
    low: float | None = None
    high: float | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.provider, self.region, self.instance_type.lower(), self.kind)


def default_cache_path() -> Path:
    """$MLCOST_PRICE_CACHE, else $XDG_CACHE_HOME/mlcost/prices.json, else ~/.cache/mlcost/."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlcost" / "prices.json"


def read_cache(path: str | os.PathLike[str]) -> list[CachedPrice]:
    """Every cached price in the file; [] when the file is missing, unreadable or foreign."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return []
    prices = []
    for item in data.get("prices", []):
        try:
            prices.append(
                CachedPrice(
                    provider=str(item["provider"]),
                    region=str(item["region"]),
                    instance_type=str(item["instance_type"]),
                    kind=str(item["kind"]),
                    per_hour=float(item["per_hour"]),
                    fetched_at=float(item["fetched_at"]),
                    source=str(item.get("source", "")),
                    low=None if item.get("low") is None else float(item["low"]),
                    high=None if item.get("high") is None else float(item["high"]),
                    attributes={str(k): str(v) for k, v in (item.get("attributes") or {}).items()},
                )
            )
        except (KeyError, TypeError, ValueError):
            continue  # one bad entry must not hide the others
    return prices


def write_cache(path: str | os.PathLike[str], new_prices: list[CachedPrice]) -> None:
    """Merge `new_prices` into the file (newer entry wins per provider/region/type/kind)."""
    merged = {p.key: p for p in read_cache(path)}
    for price in new_prices:
        merged[price.key] = price
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "version": CACHE_VERSION,
        "prices": [asdict(p) for p in sorted(merged.values(), key=lambda p: p.key)],
    }
    fd, tmp = tempfile.mkstemp(prefix=".prices-", suffix=".json", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=1)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
