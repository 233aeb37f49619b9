"""mlcost-top's fleet navigation, beside the App: from the fleet table (several --connect
daemons) to one host's full view and back (enter, escape), and --prometheus's hand-over of one
daemon found there. The App binds the keys and calls these; the panels stay the App's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlcost_tui.keyed_table import KeyedTable
from mlcost_tui.panels.fleet import FleetPanel
from mlcost_tui.panels.gpus import GpuPanel
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.sources import LiveSource

if TYPE_CHECKING:
    from daemon.client import Client
    from mlcost_tui.app import MlcostTop

HOST_PANELS = ("#gpus", "#processes", "#recommendations")  # one host's view


class FleetControl:
    """Which host's full view the App shows (`app.viewing`: None is the fleet table)."""

    def __init__(self, app: MlcostTop) -> None:
        self.app = app

    def _forget_host(self) -> None:
        """Empty one host's panels: the next host's rows must not mix with the last one's."""
        app = self.app
        panels: tuple[KeyedTable, ...] = (app.query_one(GpuPanel), app.query_one(ProcessPanel),
                                          app.query_one(RecommendationTable))
        for panel in panels:
            panel.clear_rows()
        app.query_one(GpuPanel).recent.clear()

    def open_host(self, index: int) -> None:
        """Show host `index` of the fleet with every panel, through its own daemon."""
        app = self.app
        if not app.fleet or not 0 <= index < len(app.clients):
            return
        if app.viewing != index:
            self._forget_host()
        app.viewing = index
        app.query_one(FleetPanel).add_class("hidden")
        for name in HOST_PANELS:
            app.query_one(name).remove_class("hidden")
        app.query_one(ProcessPanel).focus()
        app.refresh_bindings()
        if app.hosts:
            app.render_hosts()

    def watch_daemon(self, client: Client) -> None:
        """--prometheus: show this daemon's full view (the one before it is closed)."""
        app = self.app
        old, app.live = app.live, LiveSource([client], app.live.interval_s)
        app.run_worker(old.close(), exit_on_error=False, description="close the last daemon")
        app.hosts, app.viewing = (), 0
        self._forget_host()
        app.pop_screen()
        app.refresh_bindings()
        app.poll()

    def back_to_fleet(self) -> None:
        """escape: the fleet table again (--prometheus: its screen)."""
        app = self.app
        if app.prometheus is not None:
            if app.screen is not app.prometheus:
                app.push_screen("prometheus")
            return
        if not app.fleet or app.viewing is None:
            return
        app.viewing = None
        app.close_filter(clear=True)
        for name in HOST_PANELS:
            app.query_one(name).add_class("hidden")
        fleet = app.query_one(FleetPanel)
        fleet.remove_class("hidden")
        fleet.focus()
        app.refresh_bindings()
        if app.hosts:
            app.render_hosts()
