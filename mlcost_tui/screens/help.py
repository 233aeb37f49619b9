"""The help screen: the keys that work in the current mode (live, replay, fleet), from the
bindings themselves, then the keys of the other screens once each."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from mlcost_tui.footer import KeyFooter
from mlcost_tui.thresholds import MUTED, PHASE_COLOURS

ABOUT = ("mlcost-top shows what every GPU and GPU process on a host costs, where the money "
         "idles, and what to do about it. Figures come from mlcostd's API; '-' means the "
         "daemon has not computed that figure (yet).")

Section = tuple[str, Sequence[tuple[str, str]]]  # a title and its (keys, what they do) lines


class HelpScreen(ModalScreen[None]):
    # Toasts raised while it is open wait until it closes (MlcostTop.notify): over it they
    # covered the descriptions of the keys (at 80x24 those of a, x, k and h).
    HOLDS_TOASTS = True
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", id="help.close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90; max-width: 100%; height: 80%; border: thick $accent;
        background: $surface; padding: 1 2; }
    """

    def __init__(self, sections: Sequence[Section], mode: str, about: str = ABOUT) -> None:
        """`about`: what comes first (where the figures come from): ABOUT but on the
        --prometheus fleet table, whose figures are Prometheus's."""
        super().__init__()
        self.sections = sections
        self.mode = mode
        self.about = about

    def text(self) -> Text:
        text = Text(self.about + "\n\n")
        text.append(f"Mode: {self.mode}\n", style="bold")
        for title, lines in self.sections:
            text.append(f"\n{title}\n", style="bold")
            for keys, description in lines:
                text.append(f"  {keys:<16}", style="bold")
                text.append(f"{description}\n")
        text.append("\nPhase colours\n", style="bold")
        for name, colour in PHASE_COLOURS.items():
            text.append("  ██ ", style=colour)
            text.append(f"{name}\n")
        text.append("\nescape, q or ? closes this help.\n", style=MUTED)
        return text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.text(), id="help-body")
        # Its own footer, over the main screen's: that one went on showing `a Apply`, `k Stop`
        # … which do nothing while the help is open (probe148 L3). The help's keys only.
        yield KeyFooter()
