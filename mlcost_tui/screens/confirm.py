"""A yes/no question before something that hides or changes what the user sees (snoozing a
recommendation for a day): y or enter confirms, n or escape cancels."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y,enter", "dismiss(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "dismiss(False)", "No", id="confirm.no"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 90%; max-width: 90; height: auto; max-height: 90%;
        border: thick $accent; background: $surface; padding: 0 1; }
    ConfirmScreen VerticalScroll { height: auto; }
    ConfirmScreen Horizontal { dock: bottom; height: 3; }
    ConfirmScreen Button { margin-right: 2; }
    """

    def __init__(self, question: str, yes: str = "Yes (y)", no: str = "No (n)") -> None:
        super().__init__()
        self.question = question
        self.yes, self.no = yes, no

    def compose(self) -> ComposeResult:
        with Vertical():
            with Horizontal():
                yield Button(self.yes, id="yes", variant="warning")
                yield Button(self.no, id="no")
            with VerticalScroll():
                yield Static(self.question, markup=False, id="question")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
