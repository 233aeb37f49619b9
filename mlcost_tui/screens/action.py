"""The action modal: what applying a recommendation will do (its dry run), then do it or copy.

Above the dry run: what it saves (combined, and on its own) and how sure it is (preliminary
until enough evidence; thresholds shortened on a simulated host), so nobody acts on a figure
without its confidence."""

from __future__ import annotations

import os
from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from daemon.wire import ActionResult, Recommendation
from mlcost_tui.panels.recommendations import savings_text
from mlcost_tui.thresholds import WARN

CHANGES_HOST = ("sigterm", "resize")
READONLY_REFUSES = {"sigterm": "stop processes", "resize": "resize the instance"}
READONLY_NOTE = "mlcost-top runs --readonly: a dry run only, it will not do this."
# The daemon's dry run says it will refuse the real run (ActionResult.refused: it does not take
# actions): `y` is not offered, the reason stands beside the buttons.
REFUSED_NOTE = "mlcostd will refuse to do this: "


def copy_note(environ: Mapping[str, str] = os.environ) -> str:
    """What a copy did: the text went to the terminal as OSC 52, which some terminals refuse
    without telling anyone, so say how to copy by hand."""
    note = "Sent to your terminal's clipboard (OSC 52)"
    if environ.get("TMUX"):
        note += "; tmux passes it on only with `set -g set-clipboard on`"
    return note + ". Nothing to paste? Your terminal refused it: select the text in this " \
        "dialog with the mouse (shift+drag in most terminals) and copy it."


class ActionScreen(ModalScreen[str]):
    """Dismisses with "do" (perform it) or "" (cancel); c copies the text and stays open, so it
    can still be selected by hand when the terminal refuses the copy."""

    BINDINGS = [
        Binding("escape,n", "dismiss('')", "Cancel", id="action.cancel"),
        Binding("y", "confirm", "Do it", id="action.confirm"),
        Binding("c", "copy", "Copy", id="action.copy"),
    ]
    DEFAULT_CSS = """
    ActionScreen { align: center middle; }
    ActionScreen > Vertical { width: 90%; max-width: 120; height: auto; max-height: 100%;
        border: thick $accent; background: $surface; padding: 0 1; }
    ActionScreen VerticalScroll { height: auto; }
    #action-bottom { dock: bottom; height: auto; }
    ActionScreen Horizontal { height: 3; }
    ActionScreen Button { margin-right: 2; }
    """
    # The buttons are docked under the text, which scrolls: at 80x24 both fit.

    def __init__(self, recommendation: Recommendation, result: ActionResult,
                 readonly: bool = False) -> None:
        super().__init__()
        self.recommendation = recommendation
        self.result = result
        self.readonly = readonly

    @property
    def can_do(self) -> bool:
        return (self.result.kind in CHANGES_HOST and not self.readonly
                and self.result.refused is None)

    @property
    def refused(self) -> str | None:
        """Why the daemon will refuse the real run (its dry run said so), if it will."""
        return self.result.refused if self.result.kind in CHANGES_HOST else None

    @property
    def copy_text(self) -> str:
        if self.result.patch:
            return self.result.patch
        return "\n".join(self.result.commands or self.result.steps)

    def compose(self) -> ComposeResult:
        r, res = self.recommendation, self.result
        body = Text()
        body.append(f"{r.rule}: ", style="bold")
        body.append(r.summary + "\n")
        body.append_text(savings_text(r))
        body.append("\n\n")
        body.append("Dry run: " if res.dry_run else "", style="bold")
        message = res.message
        if self.refused is not None:  # said once, beside the buttons (REFUSED_NOTE)
            message = message.removesuffix(f"; but the real run will be refused (403): "
                                           f"{self.refused}")
        body.append(message + "\n")
        for step in res.steps:
            body.append(f"  $ {step}\n", style="bold")
        for command in res.commands:
            body.append(f"  $ {command}\n", style="bold")
        if res.patch:
            body.append("\n" + res.patch + "\n")
        if self.can_do:
            body.append("\nDo it? (y / n)\n", style="bold")
        with Vertical():
            with VerticalScroll():
                yield Static(body, id="action-body")
            with Vertical(id="action-bottom"):
                if res.kind in CHANGES_HOST and self.readonly:
                    # beside the buttons, read without scrolling (at the end of the text it
                    # was below the fold at 80x24)
                    yield Static(Text(READONLY_NOTE, style="bold " + WARN), id="readonly-note")
                elif self.refused is not None:
                    yield Static(Text(REFUSED_NOTE + self.refused, style="bold " + WARN),
                                 id="refused-note")
                yield from self._buttons()

    def _buttons(self) -> ComposeResult:
        res = self.result
        with Horizontal():
            if res.kind in CHANGES_HOST:
                label = ("--readonly: not done" if self.readonly else
                         "refused by mlcostd" if self.refused is not None else "Do it (y)")
                yield Button(label, id="do", variant="error", disabled=not self.can_do)
            if self.copy_text:
                yield Button("Copy (c)", id="copy", variant="primary")
            yield Button("Cancel (esc)", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "do":
            self.action_confirm()
        elif event.button.id == "copy":
            self.action_copy()
        else:
            self.dismiss("")

    def action_confirm(self) -> None:
        if self.can_do:
            self.dismiss("do")
        elif self.readonly and self.result.kind in CHANGES_HOST:
            self.notify(f"--readonly: mlcost-top does not {READONLY_REFUSES[self.result.kind]} "
                        "(start it without --readonly to)", title="y: not done",
                        severity="warning", timeout=6)
        elif self.refused is not None:
            self.notify(self.refused, title="y: mlcostd will refuse it", severity="warning",
                        timeout=8)

    def action_copy(self) -> None:
        if self.copy_text:
            self.app.copy_to_clipboard(self.copy_text)
            self.notify(copy_note(), title="copy", timeout=10)
