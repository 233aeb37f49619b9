"""Incident snapshots in mlcost-top: `s` takes one of the last 30 minutes through the daemon's
API, and an event that gets a snapshot (an incident trigger fired) is announced with its file.

Kept out of the App (app.py only binds the key and calls these), away from the panels.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mlcost_tui.messages import HostSnapshot

if TYPE_CHECKING:
    from daemon.client import Client

SNAPSHOT_SINCE_S = 1800.0  # `s`: the last 30 minutes


def home_short(path: str) -> str:
    """`path` with the home folder as ~ (a toast has few columns)."""
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home not in ("", "/") and path.startswith(home + "/") \
        else path


def describe(result: dict[str, Any]) -> str:
    """Where a snapshot went, in a notification's few lines."""
    path = str(result.get("path"))
    html = str(result.get("html") or "")
    lines = [f"snapshot: {home_short(path)}",
             f"{result.get('ticks', 0)} ticks, {(result.get('bytes') or 0) / 1e6:.1f} MB"
             + (", html beside it (.html)" if html == path.rsplit(".", 1)[0] + ".html" else "")]
    if html and not lines[1].endswith("(.html)"):
        lines.append(f"html: {home_short(html)}")
    for upload in result.get("upload") or []:
        lines.append(f"uploaded: {upload['url']}" if upload.get("ok")
                     else f"upload failed: {upload.get('error')}")
    return "\n".join(lines)


async def take(client: Client, upload: bool = False) -> tuple[str, bool]:
    """Take a snapshot of the last SNAPSHOT_SINCE_S through `client` (with `upload`, to the
    daemon's configured target): (text to show, ok)."""
    from daemon.client import ClientError

    try:
        result = await client.take_snapshot(SNAPSHOT_SINCE_S, html=True, upload=upload)
    except ClientError as exc:
        return f"snapshot failed: {exc}", False
    return describe(result), all(u.get("ok") for u in result.get("upload") or [])


class EventSnapshots:
    """Remembers which events' snapshots were shown, so each is announced once."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.primed = False  # the first poll's snapshots are history, not news

    def news(self, hosts: Iterable[HostSnapshot]) -> list[str]:
        """'snapshot: FILE' lines for events whose snapshot appeared since the last call."""
        found = []
        for host in hosts:
            for event in host.now.events if host.now is not None else ():
                if event.snapshot and event.snapshot not in self.seen:
                    self.seen.add(event.snapshot)
                    found.append(f"{event.kind} {event.target}\n"
                                 f"snapshot: {home_short(event.snapshot)}")
        news, self.primed = (found if self.primed else []), True
        return news


class ResolvedNotices:
    """Remembers which recommendation_resolved events were shown, so each is announced once:
    a recommendation that goes says so (daemon.analysis.book's hysteresis)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.primed = False  # the first poll's notices are history, not news

    def news(self, hosts: Iterable[HostSnapshot]) -> list[str]:
        found = []
        for host in hosts:
            for event in host.now.events if host.now is not None else ():
                if event.kind == "recommendation_resolved" and event.id not in self.seen:
                    self.seen.add(event.id)
                    found.append(event.detail or f"resolved: {event.target}")
        news, self.primed = (found if self.primed else []), True
        return news
