"""The help screen: every key, from the bindings themselves."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from mlcost_tui.thresholds import PHASE_COLOURS

ABOUT = """mlcost-top shows what every GPU and GPU process on this host costs right now, where
the money idles, and what to do about it. Figures come from mlcostd's API; '-' means the daemon
has not computed that figure (yet)."""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", id="help.close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90; height: 80%; border: thick $accent;
        background: $surface; padding: 1 2; }
    """

    def __init__(self, bindings: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.key_lines = bindings

    def compose(self) -> ComposeResult:
        text = Text(ABOUT + "\n\n")
        text.append("Keys\n", style="bold")
        for key, description, binding_id in self.key_lines:
            text.append(f"  {key:<12}", style="bold")
            text.append(f"{description:<36}")
            text.append(f"{binding_id}\n", style="grey50")
        text.append("\nPhase colours\n", style="bold")
        for name, colour in PHASE_COLOURS.items():
            text.append("  ██ ", style=colour)
            text.append(f"{name}\n")
        text.append("\nKeymaps: bindings have ids (shown right); Textual keymaps apply by id.\n",
                    style="grey50")
        with VerticalScroll():
            yield Static(text)
