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

from textual.widgets import Footer

if TYPE_CHECKING:
    from textual.screen import Screen


class KeyFooter(Footer):
    """A Footer that rebuilds when its screen's active keys (each key's binding, whether it is
    enabled, its tooltip) differ from those of its last build."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
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
