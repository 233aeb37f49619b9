"""prometheus-client's text exposition, written fast for a scrape every tick.

`Family` holds one family's many series as plain rows (no prometheus-client Sample per
series); `Exposition` writes families (these, or prometheus-client's own Metrics) as
generate_latest would, byte for byte, while writing each family's HELP and TYPE lines and each
series' name and labels only once, and a value's line again only when the value changed.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

LabelPairs = tuple[tuple[str, str], ...]  # a series' labels, in the order they are written


class Family:
    """One family of many series, kept as (sample name, label pairs, value) rows: what
    `Exposition` writes without a prometheus-client Sample per series, and what `metric()`
    turns into prometheus-client's Metric for the registry (generate_latest writes the same
    bytes from either). For the numerous families (per GPU, per workload, per pod)."""

    __slots__ = ("name", "documentation", "type", "rows")

    def __init__(self, name: str, documentation: str, kind: str) -> None:
        self.name, self.documentation, self.type = name, documentation, kind
        self.rows: list[tuple[str, LabelPairs, float]] = []

    def add(self, labels: LabelPairs, value: float, suffix: str = "") -> None:
        """A series: `suffix` "_total" for a counter's."""
        self.rows.append((self.name + suffix, labels, value))

    def metric(self) -> Metric:
        metric = Metric(self.name, self.documentation, self.type)
        for name, labels, value in self.rows:
            metric.add_sample(name, dict(labels), value)
        return metric


class _One:
    """A collector of one family: what generate_latest writes for it alone."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> list[Metric]:
        return [self.metric]


# Samples that generate_latest moves out of their family (OpenMetrics-only series), and samples
# with a timestamp: a family holding any is written by generate_latest whole, every scrape.
_MOVED_SUFFIXES = ("_created", "_gsum", "_gcount")
_SeriesKey = tuple[str, LabelPairs]


class Exposition:
    """generate_latest's text exposition, byte for byte, with each family's HELP and TYPE lines
    and each series' name and labels written once: a series keeps its labels from scrape to
    scrape, so a scrape writes only the values of the series it wrote before (prometheus-client's
    float format), and a series whose value did not change since the last scrape is its line
    of then. What is new to a scrape (a family, a series) is written by generate_latest itself,
    and kept for the next scrape while it lasts; what a scrape no longer has is dropped.
    At 500 series, this is most of what a scrape costs (issue 23: 5 ms a scrape)."""

    def __init__(self) -> None:
        self._heads: dict[tuple[str, str, str], str] = {}
        # series -> (its name and labels as written, its last value, that value's line)
        self._series: dict[_SeriesKey, tuple[str, float, str]] = {}

    def render(self, families: Iterable[Metric | Family]) -> bytes:
        out: list[str] = []
        heads: dict[tuple[str, str, str], str] = {}
        series: dict[_SeriesKey, tuple[str, float, str]] = {}
        known = self._series
        for family in families:
            if isinstance(family, Family):
                rows: Iterable[tuple[str, LabelPairs, float]] = family.rows
            else:
                moved = tuple(family.name + suffix for suffix in _MOVED_SUFFIXES)
                if any(s.timestamp is not None or s.name in moved for s in family.samples):
                    out.append(generate_latest(_One(family)).decode())
                    continue
                rows = [(s.name, tuple(s.labels.items()), s.value) for s in family.samples]
            head_key = (family.name, family.type, family.documentation)
            head = heads.get(head_key) or self._heads.get(head_key)
            if head is None:
                head = generate_latest(_One(Metric(family.name, family.documentation,
                                                   family.type))).decode()
            heads[head_key] = head
            out.append(head)
            for name, labels, value in rows:
                entry = known.get((name, labels)) or series.get((name, labels))
                if entry is None:
                    alone = Metric(family.name, family.documentation, family.type)
                    alone.add_sample(name, dict(labels), 0.0)
                    prefix = generate_latest(_One(alone)).decode()[len(head):].rsplit(" ", 1)[0]
                elif value == entry[1] and value:  # unchanged (0.0 and -0.0 are written apart)
                    series[name, labels] = entry
                    out.append(entry[2])
                    continue
                else:
                    prefix = entry[0]
                line = f"{prefix} {floatToGoString(value)}\n"
                series[name, labels] = (prefix, value, line)
                out.append(line)
        self._heads, self._series = heads, series
        return "".join(out).encode("utf-8")
