"""Grid carbon intensity (grams CO2e per kWh) of the host's electricity: a config value, else
the bundled table's annual average for the detected cloud region, else unknown.

The table (pricing/data/grid_intensity.csv) carries each figure's source and date, like the
price catalog; its figures are annual averages of the grid a region draws from (location-based),
so grams of CO2e from them are estimates of the grid's average, not of a given hour.
Unknown stays unknown: no figure is invented for a region the table lacks.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUNDLED_GRID_TABLE = Path(__file__).resolve().parent / "data" / "grid_intensity.csv"
JOULES_PER_KWH = 3.6e6
CONFIG_SOURCE = "config [energy].grid_intensity_g_per_kwh"
UNKNOWN_FIX = "set [energy].grid_intensity_g_per_kwh (your utility's figure) or [energy].region"


@dataclass(frozen=True, slots=True)
class GridRow:
    """One region of the table."""

    provider: str
    region: str
    g_per_kwh: float
    location: str
    source: str
    data_year: str
    as_of: str


@dataclass(frozen=True, slots=True)
class GridIntensity:
    """The grid intensity used for carbon, and where it came from; `g_per_kwh` None: unknown
    (then `source` says why and how to set one)."""

    g_per_kwh: float | None
    source: str
    as_of: str | None = None
    provider: str | None = None
    region: str | None = None

    def grams(self, joules: float) -> float | None:
        """Grams CO2e of `joules` drawn from this grid; None when the intensity is unknown."""
        if self.g_per_kwh is None:
            return None
        return joules / JOULES_PER_KWH * self.g_per_kwh

    def as_dict(self) -> dict[str, Any]:
        return {"g_per_kwh": self.g_per_kwh, "source": self.source, "as_of": self.as_of,
                "provider": self.provider, "region": self.region}

    @classmethod
    def from_dict(cls, recorded: Any) -> GridIntensity | None:
        """The intensity a daemon recorded (`as_dict()` in the store's host facts), None when
        there is none or it is malformed."""
        if not isinstance(recorded, dict) or not isinstance(recorded.get("source"), str):
            return None
        value = recorded.get("g_per_kwh")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0 < value <= 2000):
            return None

        def text(key: str) -> str | None:
            found = recorded.get(key)
            return found[:64] if isinstance(found, str) else None

        return cls(None if value is None else float(value), recorded["source"][:400],
                   text("as_of"), text("provider"), text("region"))


@functools.cache
def grid_table(path: Path = BUNDLED_GRID_TABLE) -> dict[tuple[str, str], GridRow]:
    """The table by (provider, region), lower case; '#' lines are its notes."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(line for line in handle if not line.startswith("#"))
        table = {}
        for row in rows:
            found = GridRow(row["provider"].lower(), row["region"].lower(),
                            float(row["g_co2e_per_kwh"]), row["location"], row["source"],
                            row["data_year"], row["as_of"])
            table[(found.provider, found.region)] = found
    return table


def find_region(region: str) -> GridRow | None:
    """The table's row for a region name alone (the clouds' region names do not collide:
    us-east-1, us-east1, eastus), None when it has none."""
    wanted = region.strip().lower()
    found = [row for (_, name), row in grid_table().items() if name == wanted]
    return found[0] if len(found) == 1 else None


def grid_intensity(provider: str | None, region: str | None, *,
                   override_g_per_kwh: float = 0.0, override_region: str = "") -> GridIntensity:
    """The intensity to use: the configured figure, else the configured region's, else the
    detected provider's region's, else unknown (with the reason and the fix)."""
    if override_g_per_kwh > 0:
        return GridIntensity(override_g_per_kwh, CONFIG_SOURCE, None, provider, region)
    if override_region:
        row = find_region(override_region)
        if row is None:
            return GridIntensity(None, f"carbon unknown: [energy].region {override_region!r} is "
                                       f"not in the grid table; {UNKNOWN_FIX}")
    elif provider and region:
        row = grid_table().get((provider.lower(), region.lower()))
        if row is None:
            return GridIntensity(None, f"carbon unknown: no grid intensity for {provider}/"
                                       f"{region} in the table; {UNKNOWN_FIX}", None,
                                 provider, region)
    else:
        return GridIntensity(None, f"carbon unknown: the host's cloud region is not known "
                                   f"(off-cloud or undetected); {UNKNOWN_FIX}", None,
                             provider, region)
    year = f"{row.data_year} data, " if row.data_year else ""
    origin = row.source.split("; via ")[0]  # the file names the table it was read from too
    return GridIntensity(row.g_per_kwh, f"grid table, annual average: {origin} ({year}"
                                        f"{row.provider}/{row.region} as of {row.as_of})",
                         row.as_of, row.provider, row.region)
