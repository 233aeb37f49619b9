"""The key footer of every mlcost-top screen: Textual's Footer, rebuilt only when the keys it
shows change.

Textual's Footer is one widget per key (13 on the main screen), each styled from the CSS, and it
builds them all again whenever its screen says the bindings may have changed: on every focus
change, twice (screen.set_focus), and when a screen is pushed. Starting mlcost-top that was one
empty build and five rebuilds (65 key widgets) in the first 0.3 s after the first frame, ~0.13 s
of CPU (cProfile), and every tab between panels, whose keys are the App's, built it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.binding import Binding
from textual.widgets import Footer

if TYPE_CHECKING:
    from textual.screen import Screen


# The keys of a main-screen panel shown in the footer: tab to the next panel, enter to open the
# row. Bound on the panels, not the App, so they show only where they do that (a details,
# GPU or history screen has no panels to go through).
PANEL_KEYS: list[Binding | tuple[str, str] | tuple[str, str, str]] = [
    Binding("tab", "app.focus_next", "Panel", id="panel.next"),
    Binding("enter", "select_cursor", "Open", id="panel.open")]


class KeyFooter(Footer):
    """A Footer that rebuilds when its screen's active keys (each key's binding, whether it is
    enabled, its tooltip) differ from those of its last build.

    Compact (one space between keys) and without the command palette's key (ctrl+p still opens
    it; `?` says so): the keys that matter most fit 80 columns whole, where Textual's footer
    cut the last one in half ("p P▏") and never showed tab, enter or s. The other keys are
    bound with show=False and listed by `?`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("compact", True)
        kwargs.setdefault("show_command_palette", False)
        super().__init__(*args, **kwargs)
        self._built_for: tuple[object, ...] | None = None  # the keys of the last build asked

    def bindings_changed(self, screen: Screen) -> None:
        keys = tuple((key, active.binding, active.enabled, active.tooltip)
                     for key, active in screen.active_bindings.items())
        if keys == self._built_for:
            return
        super().bindings_changed(screen)
        # Recorded only when Footer asked for a build (it does not while the app has lost the
        # focus, textual-web): the next change after that must still build.
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            self._built_for = keys
