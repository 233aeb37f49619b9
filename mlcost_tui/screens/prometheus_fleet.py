"""`mlcost-top --prometheus URL`: the fleet table from Prometheus itself (hosts, burn, waste,
idle and lost GPUs, the top recommendation), polled away from the UI; enter on a host opens its daemon's
full view when its API is reachable on TCP (escape comes back here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from daemon import clock as daemon_clock
from mlcost_tui import format as fmt
from mlcost_tui.footer import KeyFooter
from mlcost_tui.keyed_table import Column, KeyedTable, fit_columns
from mlcost_tui.layout import SCROLLBAR_COLUMNS
from mlcost_tui.panels.fleet import FLEET_ORDER, fitted_row
from mlcost_tui.prometheus import (
    DEFAULT_JOB,
    FleetHost,
    FleetView,
    PrometheusError,
    PrometheusFleet,
)
from mlcost_tui.thresholds import BAD, GOOD, MUTED, WARN

if TYPE_CHECKING:
    from daemon.client import Client

HEALTH_TIMEOUT_S = 3.0  # how long enter waits for a host's daemon to answer
LAST_SEEN_MARK = " (last seen)"  # after a down host's name: the one it had when it reported
LOST_MARK = "✕"  # after a host's GPU count, with how many of them its daemon cannot read


def help_about(job: str) -> str:
    """What `?` says first on this table: where its figures come from, and its marks."""
    return ("mlcost-top --prometheus shows the fleet as Prometheus has scraped it: one row per "
            f"mlcostd under the scrape jobs that match --prometheus-job (here {job!r}). Its "
            "figures come from Prometheus (instant queries over the series each mlcostd "
            "exports on /metrics), not from any daemon's API; '-' means Prometheus holds no such "
            "series for that host. A host Prometheus cannot scrape reads 'down', under the name "
            f"and instance type it last reported, marked '{LAST_SEEN_MARK.strip()}' (its "
            "mlcost_host_info within the last hour): what it was, not what it is now. GPUs "
            f"'4{LOST_MARK}1': 4 GPUs, 1 of them lost (its mlcostd cannot read it: lost, timed "
            "out or failing, mlcost_gpu_up 0), billed all the same and never counted idle. A "
            "narrow terminal drops the scrape target's column first, and so does a down "
            "host's name with its mark where both do not fit (a host with no name then shows "
            "its target in its place).")


def gpus_cell(host: FleetHost) -> Any:
    """The host's GPU count, and how many of them are lost after LOST_MARK."""
    if host.gpus is None:
        return fmt.DASH
    if not host.lost_gpus:
        return str(host.gpus)
    return Text.assemble(str(host.gpus), (f"{LOST_MARK}{host.lost_gpus}", "bold " + BAD))


def last_seen_name(name: str, width: int | None) -> Text:
    """A down host's last known name, marked as such; cut to `width` with `…`, the mark kept
    while the name keeps a few characters."""
    if width is not None and len(name) + len(LAST_SEEN_MARK) > width:
        if width - len(LAST_SEEN_MARK) >= 4:
            name = fmt.cut(name, width - len(LAST_SEEN_MARK))
        else:
            return Text(fmt.cut(name + LAST_SEEN_MARK, width), style="italic " + MUTED)
    return Text.assemble(name, (LAST_SEEN_MARK, MUTED), style="italic")


class PrometheusFleetTable(KeyedTable):
    # enter opens the host, and the footer says so: DataTable's own enter (shown nowhere) took
    # the screen's "Open host" out of the footer (probe 148 L6), as the --connect table shows it
    BINDINGS = [Binding("enter", "select_cursor", "Open host", id="prometheus.table.open")]
    # At 80 columns the host, burn, waste, GPUs, idle GPUs and what the host's advice saves;
    # the host names take what the figures leave, cut with `…`. The scrape target (the address
    # Prometheus scrapes: "scraped at" read as a time) is the first to go, before the savings
    # (probe 121 F8): a host has its name, and one with none shows its target in its place.
    COLUMNS = (Column("host", "host", 10, flex=True),
               Column("instance", "target", 12, priority=5, flex=True),
               Column("status", "status", 6),
               Column("type", "instance type", 13, priority=2), Column("burn", "burn $/h", 9),
               Column("wasted", "wasted $/h", 10, priority=1), Column("gpus", "GPUs", 4),
               Column("idle", "idle GPUs", 9),
               Column("top", "top recommendation", 28, priority=3),
               Column("top_saves", "it saves/month", 14, priority=4),
               Column("saves", "all save/month", 14, priority=1))
    DEFAULT_CSS = ("PrometheusFleetTable { height: 1fr; border: round $accent; "
                   "scrollbar-size-vertical: 1; }")
    view: FleetView | None = None  # the last shown, shown again when the columns change
    answered_at: str | None = None  # HH:MM:SS of the view, while Prometheus stops answering

    def on_resize(self) -> None:
        if self.view is not None:
            self.show(self.view, self.answered_at)  # (fits the columns to the view first)
        else:
            self.fit(self.size.width - SCROLLBAR_COLUMNS)

    def fit_view(self, view: FleetView) -> None:
        """The columns that fit the table's width; where a down host's name and its
        `(last seen)` mark do not fit in the host's column beside the scrape target's, the
        target's column goes first, as it does on a narrow terminal (at 160 columns the mark
        was cut and the target stayed: probe 156 F5)."""
        width = self.size.width - SCROLLBAR_COLUMNS
        if width <= 0:
            return  # not laid out yet: on_resize fits it
        columns = fit_columns(self.all_columns(), width)
        need = max((len(h.hostname) + len(LAST_SEEN_MARK) for h in view.hosts
                    if not h.up and h.last_seen and h.hostname), default=0)
        host = next((c.width or 0 for c in columns if c.key == "host"), need)
        if host < need and any(c.key == "instance" for c in columns):
            columns = fit_columns([c for c in self.all_columns() if c.key != "instance"], width)
        self.show_columns(columns)

    def show(self, view: FleetView, answered_at: str | None = None) -> None:
        """`answered_at`: the time of the view's answer when Prometheus has stopped answering
        since (the rows are then that answer's, and the title says so)."""
        self.view, self.answered_at = view, answered_at
        self.fit_view(view)
        host_width = next((c.width for c in self.columns_shown if c.key == "host"), None)
        rows: list[tuple[str, tuple[Any, ...]]] = []

        def row(*cells: Any) -> tuple[Any, ...]:
            return fitted_row(self, cells, ("host", "top"), targets=("instance",))

        # a host with no name: its target, where the target's column is not shown
        targets_shown = "instance" in self.shown_keys
        # the costliest hosts first; hosts Prometheus cannot scrape at the top
        for host in sorted(view.hosts, key=lambda h: (h.up, -(h.burn_per_hour or 0.0))):
            unnamed = host.instance if not targets_shown else fmt.DASH if not host.up else "?"
            if not host.up:
                name: Any = host.hostname or unnamed
                kind: Any = host.instance_type or fmt.DASH
                if host.last_seen and host.hostname:
                    name = last_seen_name(host.hostname, host_width)
                    kind = Text(kind, style="italic " + MUTED)
                rows.append((host.instance, row(name, host.instance,
                                                Text("down", style="bold " + BAD), kind,
                                                *(fmt.DASH,) * 7)))
                continue
            idle = host.idle_gpus or 0
            rows.append((host.instance, row(
                host.hostname or unnamed, host.instance, Text("up", style=GOOD),
                host.instance_type or fmt.DASH, fmt.money(host.burn_per_hour),
                fmt.money(host.wasted_per_hour), gpus_cell(host),
                Text(str(idle), style=BAD if idle else ""), host.top_rule or fmt.DASH,
                fmt.money(host.top_rule_savings_per_month if host.top_rule else None),
                fmt.money(host.savings_per_month))))
        self.sync(rows)
        when = f" · as at {answered_at}, its last answer" if answered_at else ""
        self.border_title = (f"Fleet from Prometheus: {len(view.hosts)} daemons, {view.up} up"
                             f"{when} · {FLEET_ORDER}")


def no_daemons(url: str, view: FleetView) -> str:
    """What to do when Prometheus holds no mlcostd under the scrape jobs asked for."""
    asked = f"job=~{view.job!r}"
    if view.elsewhere:
        jobs = ", ".join(repr(j) for j in view.elsewhere)
        regex = "|".join(view.elsewhere)
        return (f"No mlcostd under the scrape jobs {asked} at {url}, but mlcost_host_info is "
                f"scraped as job {jobs}: run mlcost-top --prometheus {url} --prometheus-job "
                f"'{regex}', or name the scrape job mlcost")
    job = "" if view.job == DEFAULT_JOB else " (or pass its name as --prometheus-job REGEX)"
    return (f"No mlcostd at {url}: no target under the scrape jobs {asked} and no "
            f"mlcost_host_info under any job. Scrape each mlcostd's /metrics (mlcostd run "
            f"--metrics-listen 0.0.0.0:9400) in a scrape job named mlcost{job}: README "
            "\"On a fleet\", Scraping")


def summary(url: str, view: FleetView | None, error: str | None,
            answered_at: str | None = None) -> Text:
    text = Text()
    text.append("mlcost-top fleet ", style="bold")
    text.append(f"from {url}  ", style=MUTED)
    if view is not None:
        known = [h.idle_gpus for h in view.hosts if h.up and h.idle_gpus is not None]
        idle = sum(known) if known else None
        text.append(f"{view.up}/{len(view.hosts)} up  ")
        text.append(f"burn {fmt.money(view.burn())}/h  ")
        down, _ = view.unreported()
        if down:  # billed all the same: kept in the burn at their last price, and said
            text.append(f"({down} not reporting, at {'its' if down == 1 else 'their'} last "
                        "price)  ", style=MUTED)
        text.append(f"wasted {fmt.money(view.total('wasted_per_hour'))}/h  ")
        text.append(f"idle GPUs {fmt.DASH if idle is None else idle}", style=BAD if idle else "")
        lost = sum(h.lost_gpus or 0 for h in view.hosts if h.up)
        if lost:
            text.append(f"  lost GPUs {lost}", style="bold " + BAD)
        if answered_at:
            text.append(f"  (as at {answered_at})", style=MUTED)
    if error:
        text.append(f"\n✕ {error}", style="bold " + BAD)
    elif view is not None and not view.hosts:
        text.append(f"\n! {no_daemons(url, view)}", style="bold " + WARN)
    return text


class PrometheusFleetScreen(Screen):
    """The fleet table. The App shows a host's daemon through `watch_daemon(client)`."""

    BINDINGS = [Binding("q", "app.quit", "Quit", id="prometheus.quit"),
                Binding("enter", "open_host", "Open host", id="prometheus.open")]
    # The summary grows for an error or advice that takes lines (wrapped, never cut at the edge).
    DEFAULT_CSS = "#prometheus-summary { height: auto; max-height: 8; padding: 0 1; }"

    def __init__(self, source: PrometheusFleet, *, token: str | None = None,
                 interval_s: float = 5.0) -> None:
        super().__init__()
        self.source = source
        self.token = token
        self.interval_s = interval_s
        self.view: FleetView | None = None
        self.error: str | None = None
        self.answered_at: str | None = None  # HH:MM:SS of self.view's answer
        self.stale = False  # Prometheus has stopped answering since self.view

    def compose(self) -> ComposeResult:
        yield Static(summary(self.source.shown_url, None, None), id="prometheus-summary")
        yield PrometheusFleetTable(id="prometheus-fleet")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one(PrometheusFleetTable).focus()
        self.poll()

    @work(exclusive=True, group="prometheus", exit_on_error=False,
          description="query Prometheus for the fleet")
    async def poll(self) -> None:
        try:
            self.view, self.error = await self.source.fetch(), None
            self.answered_at, self.stale = fmt.clock_time(daemon_clock.now()), False
        except PrometheusError as exc:
            # The last good table stays, under the error and the time of its answer; a URL
            # that answered before is not to be "checked".
            self.stale = self.view is not None
            self.error = (f"{exc.message}; the table is its last answer, at {self.answered_at}"
                          if self.stale else str(exc))
        finally:
            if self.is_attached:
                self.set_timer(self.interval_s, self.poll, name="next Prometheus poll")
        answered_at = self.answered_at if self.stale else None
        self.query_one("#prometheus-summary", Static).update(
            summary(self.source.shown_url, self.view, self.error, answered_at))
        if self.view is not None:
            with self.app.batch_update():
                self.query_one(PrometheusFleetTable).show(self.view, answered_at)

    def selected(self) -> FleetHost | None:
        table = self.query_one(PrometheusFleetTable)
        if self.view is None or table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((h for h in self.view.hosts if h.instance == key), None)

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_host()

    def action_open_host(self) -> None:
        host = self.selected()
        if host is not None:
            self.open_host(host)

    @work(exclusive=True, group="open-host", exit_on_error=False,
          description="reach the chosen host's daemon")
    async def open_host(self, host: FleetHost) -> None:
        from daemon.client import Client, ClientError

        name = host.hostname or host.instance
        if not host.up:
            seen = " (the name it last reported)" if host.last_seen else ""
            self.notify(f"{name}{seen} is down: Prometheus cannot scrape its mlcostd at "
                        f"{host.instance}", severity="error")
            return
        url = host.api_url
        if url is None:
            self.notify(f"{name}: its mlcostd serves no API on TCP (start it with --listen "
                        "HOST:PORT and a token); its metrics are all Prometheus has",
                        severity="warning")
            return
        client: Client = Client(url, token=self.token, timeout_s=HEALTH_TIMEOUT_S)
        try:
            await client.health()
        except ClientError as exc:
            await client.close()
            self.notify(f"{name}: its daemon at {url} is not reachable: {exc}",
                        severity="error")
            return
        self.app.watch_daemon(Client(url, token=self.token))  # type: ignore[attr-defined]
        await client.close()

    async def on_unmount(self) -> None:
        await self.source.close()
