"""The self-contained HTML report of a recording (a snapshot or any store): `render_store(path)`.

`data.collect` reads what the page shows from the store; `render.render` turns that into one
HTML page. Kept apart from the daemon (it reads a file, never a running daemon), so other
recordings (a profile of one command) can be rendered with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from daemon.report_html.data import ReportData, collect
from daemon.report_html.render import render

__all__ = ["ReportData", "collect", "render", "render_store"]


def render_store(path: str | Path, since: float | None = None,
                 until: float | None = None, title: str | None = None,
                 summary: Sequence[str] = ()) -> str:
    """The HTML report of the store or snapshot at `path` (its whole range by default), with
    `title` in place of the snapshot's own (a profile's page says it is a profile) and
    `summary` lines above the charts (a profile's verdict and gates)."""
    data = collect(path, since, until)
    if title is not None:
        data.title = title
    data.summary = list(summary)
    return render(data)
