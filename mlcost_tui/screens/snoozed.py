"""The snoozed recommendations (`u` once the undo after a snooze has passed): each with until
when it is hidden; enter or u brings the highlighted one back into the list (DELETE
/v1/recommendations/{id}/snooze), escape closes."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from daemon.clock import local_time
from daemon.wire import Recommendation
from mlcost_tui import format as fmt


def snoozed_line(rec: Recommendation) -> Text:
    """One snoozed recommendation: until when, what it saves, what it says."""
    until = local_time(rec.snoozed_until, seconds=False) if rec.snoozed_until else fmt.DASH
    text = Text(f"until {until}  ", style="bold")
    text.append(f"{fmt.money(rec.savings_per_month, '/month')}  ")
    text.append(rec.headline or rec.summary)
    return text


class SnoozedScreen(ModalScreen[Recommendation | None]):
    """Dismissed with the recommendation to bring back, or None."""

    BINDINGS = [
        Binding("enter,u", "bring_back", "Bring back", id="snoozed.bring_back"),
        Binding("escape,q", "dismiss(None)", "Close", id="snoozed.close"),
    ]
    DEFAULT_CSS = """
    SnoozedScreen { align: center middle; }
    SnoozedScreen > Vertical { width: 90%; max-width: 110; height: auto; max-height: 90%;
        border: thick $accent; background: $surface; padding: 0 1; }
    SnoozedScreen OptionList { height: auto; max-height: 16; }
    """

    def __init__(self, snoozed: list[Recommendation]) -> None:
        super().__init__()
        self.snoozed = snoozed

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Snoozed recommendations ({len(self.snoozed)}): hidden here and "
                         "for every client of this mlcostd until then", markup=False)
            yield OptionList(*(Option(snoozed_line(r), id=r.id) for r in self.snoozed))
            yield Static("enter or u brings the highlighted one back into the list · "
                         "escape closes", markup=False, classes="muted")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()  # enter on a row (the list's own enter): that one
        self.dismiss(self.snoozed[event.option_index])

    def action_bring_back(self) -> None:
        options = self.query_one(OptionList)
        at = options.highlighted
        self.dismiss(self.snoozed[at] if at is not None else None)
