"""The live-price cache: a small JSON file of prices fetched from a cloud API, with fetch times.

`refresh` writes it, `catalog` overlays it on the bundled catalog. Writes are atomic (temp file +
rename) so a reader never sees half a file; a missing or unreadable file reads as empty.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pricing.small_file import read_small_file

CACHE_VERSION = 1
MAX_CACHE_BYTES = 64 << 20  # every cloud's refreshed prices: a few MB
CACHE_ENV = "MLCOST_PRICE_CACHE"


@dataclass(frozen=True)
class CachedPrice:
    """One live price as fetched: host $/h (spot: low/high across availability zones)."""

    provider: str
    region: str
    instance_type: str
    # "on-demand" | "spot" | "commit-1y" | "commit-3y" overlay the catalog; "low-priority"
    # (Azure) and "managed" (SageMaker, Vertex AI, Azure ML: see pricing.managed) are kept apart.
    kind: str
    per_hour: float
    fetched_at: float  # unix seconds
    source: str
    low: float | None = None
    high: float | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    url: str = ""  # the request that returned it, without any API key

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
    prices = []
    for item in _read_raw(path).get("prices", []):
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
                    url=str(item.get("url") or ""),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue  # one bad entry must not hide the others
    return prices


@dataclass(frozen=True)
class RefreshRecord:
    """The outcome of the last refresh from one source (aws, azure, gcp, catalog, ...)."""

    source: str
    at: float  # unix seconds
    ok: bool
    fetched: int
    errors: tuple[str, ...] = ()


def _read_raw(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The file's document; {} when it is missing, unreadable (a FIFO, a device or a folder
    there included: pricing.small_file), not JSON or of another version."""
    try:
        data = json.loads(read_small_file(path, MAX_CACHE_BYTES))
    except (ValueError, RecursionError):  # (SmallFileError and UnicodeDecodeError are too)
        return {}
    return data if isinstance(data, dict) and data.get("version") == CACHE_VERSION else {}


def read_refresh_log(path: str | os.PathLike[str]) -> dict[str, RefreshRecord]:
    """{source: its last refresh}; {} when none was recorded."""
    log = {}
    for source, item in (_read_raw(path).get("refreshes") or {}).items():
        try:
            log[str(source)] = RefreshRecord(str(source), float(item["at"]), bool(item["ok"]),
                                             int(item.get("fetched", 0)),
                                             tuple(str(e) for e in item.get("errors", ())))
        except (KeyError, TypeError, ValueError):
            continue
    return log


def record_refresh(path: str | os.PathLike[str], record: RefreshRecord) -> None:
    """Remember how the last refresh from `record.source` went (prices are left as they are)."""
    _write(path, read_cache(path), {**read_refresh_log(path), record.source: record})


def write_cache(path: str | os.PathLike[str], new_prices: list[CachedPrice]) -> None:
    """Merge `new_prices` into the file (newer entry wins per provider/region/type/kind)."""
    merged = {p.key: p for p in read_cache(path)}
    for price in new_prices:
        merged[price.key] = price
    _write(path, list(merged.values()), read_refresh_log(path))


def _make_folder(folder: Path) -> None:
    """The cache's folder and the missing ones above it, 0755 less the umask: never writable
    by others (under umask 000 a 0777 folder let any user replace the prices mlcostd reads)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir(mode=0o755, exist_ok=True)


def _write(path: str | os.PathLike[str], prices: list[CachedPrice],
           refreshes: dict[str, RefreshRecord]) -> None:
    target = Path(path)
    try:  # replaced whole: only a regular file, never a link, a FIFO or a device named there
        if not stat.S_ISREG(os.lstat(target).st_mode):
            raise OSError(f"{target} is not a regular file (a link, a folder, a FIFO or a "
                          "device): it is left as it is")
    except FileNotFoundError:
        pass
    _make_folder(target.parent)
    payload = {
        "version": CACHE_VERSION,
        "prices": [asdict(p) for p in sorted(prices, key=lambda p: p.key)],
        "refreshes": {source: {**asdict(r), "errors": list(r.errors)}
                      for source, r in sorted(refreshes.items())},
    }
    fd, tmp = tempfile.mkstemp(prefix=".prices-", suffix=".json", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=1)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
