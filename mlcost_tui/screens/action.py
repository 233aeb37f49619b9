"""The action modal: what applying a recommendation will do (its dry run), then do it or copy.

Above the dry run: what it saves (combined, and on its own) and how sure it is (preliminary
until enough evidence; thresholds shortened on a simulated host), so nobody acts on a figure
without its confidence. A resize names, beside its buttons, the processes it stops (every
serving one always), and on preliminary evidence `y` asks a second time."""

from __future__ import annotations

import os
from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from daemon.wire import ActionResult, Process, Recommendation
from mlcost_tui import format as fmt
from mlcost_tui.panels.recommendations import savings_text
from mlcost_tui.screens.hanging import HangingStatic, HangingText
from mlcost_tui.thresholds import MUTED, WARN

CHANGES_HOST = ("sigterm", "resize")
READONLY_REFUSES = {"sigterm": "stop processes", "resize": "resize the instance"}
READONLY_NOTE = "mlcost-top runs --readonly: a dry run only, it will not do this."
# The daemon's dry run says it will refuse the real run (ActionResult.refused: it does not take
# actions): `y` is not offered, the reason stands beside the buttons.
REFUSED_NOTE = "mlcostd will refuse to do this: "


# A resize stops the instance: every process on it stops, a server's too. Its dialog names
# them beside its buttons (read without scrolling): every serving one, then the others up to
# this many lines in a short terminal (80x24), RUNNING_LINES in a taller one, then "and N more".
RUNNING_LINES_SHORT = 3
RUNNING_LINES = 10
SHORT_ROWS = 30


def running_text(processes: tuple[Process, ...] | None, limit: int, width: int) -> Text:
    """What a resize takes down: a line per process (pid, kind, `serves`, command), the
    serving ones first and always all of them, the others up to `limit` lines."""
    text = Text()
    if processes is None:
        text.append("Stops every process on this host (mlcost-top has no list of them now)",
                    style="bold " + WARN)
        return text
    servers = [p for p in processes if p.serves]
    others = [p for p in processes if not p.serves]
    shown = servers + others[:max(limit - len(servers), 0)]
    text.append(f"Stops every process on this host: "
                f"{fmt.plural(len(processes), 'process', 'processes')}"
                + (f", {len(servers)} serving" if servers else ""), style="bold " + WARN)
    for p in shown:
        head = f"\n  pid {p.pid:<7} {(p.kind or 'unknown')[:16]:<16} "
        text.append(head)
        text.append(f"{'serves' if p.serves else '':<7}", style="bold " + WARN)
        text.append(fmt.short_command(p.command, max(width - len(head) - 7, 10)))
    if len(processes) > len(shown):
        text.append(f"\n  and {len(processes) - len(shown)} more", style=MUTED)
    return text


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
        # The text scrolls with these wherever the focus is (on a button too): the body has
        # them itself while it has the focus, as it has when the dialog opens.
        *(Binding(key, f"scroll_body('{how}')", how, show=False)
          for key, how in (("down", "down"), ("up", "up"), ("pagedown", "page_down"),
                           ("pageup", "page_up"), ("home", "home"), ("end", "end"))),
    ]
    DEFAULT_CSS = """
    ActionScreen { align: center middle; }
    ActionScreen > Vertical { width: 90%; max-width: 120; height: auto; max-height: 100%;
        border: thick $accent; background: $surface; padding: 0 1; }
    ActionScreen VerticalScroll { height: auto; max-height: 100%; }
    #action-bottom { dock: bottom; height: auto; }
    ActionScreen Horizontal { height: 3; }
    ActionScreen Button { margin-right: 2; }
    """
    # The buttons are docked under the text, which takes the height left above them and
    # scrolls: at 80x24 both fit. (With `height: auto` alone the text grew to its whole length
    # and was cut by the box, never scrolling: probe148 M1.)

    def __init__(self, recommendation: Recommendation, result: ActionResult,
                 readonly: bool = False, running: tuple[Process, ...] | None = None) -> None:
        super().__init__()
        self.recommendation = recommendation
        self.result = result
        self.readonly = readonly
        self.running = running  # the host's processes as last polled (a resize stops them)

    @property
    def preliminary(self) -> bool:
        """A resize on evidence its recommendation calls preliminary (confidence low): `y`
        asks a second time, and the daemon refuses it without that (accept_preliminary)."""
        r = self.recommendation
        return self.result.kind == "resize" and (r.preliminary or r.confidence == "low")

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
        if res.kind == "sigterm" and r.action_text:
            # what stopping it means, before "Do it?" (a notebook's: its user's state is lost)
            body.append(r.action_text + "\n\n")
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
                # a wrapped command's continuation indented under its `$` (screens/hanging.py);
                # selected by hand, it is copied whole, on one line
                yield HangingStatic(HangingText(body), id="action-body")
            with Vertical(id="action-bottom"):
                if res.kind in CHANGES_HOST and self.readonly:
                    # beside the buttons, read without scrolling (at the end of the text it
                    # was below the fold at 80x24)
                    yield Static(Text(READONLY_NOTE, style="bold " + WARN), id="readonly-note")
                elif self.refused is not None:
                    yield Static(Text(REFUSED_NOTE + self.refused, style="bold " + WARN),
                                 id="refused-note")
                if res.kind == "resize":
                    width, height = self.app.size
                    yield Static(running_text(
                        self.running, RUNNING_LINES_SHORT if height < SHORT_ROWS
                        else RUNNING_LINES, min(width * 9 // 10, 120) - 4), id="running")
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

    def action_scroll_body(self, how: str) -> None:
        body = self.query_one(VerticalScroll)
        getattr(body, f"scroll_{how}")(animate=False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "do":
            self.action_confirm()
        elif event.button.id == "copy":
            self.action_copy()
        else:
            self.dismiss("")

    def action_confirm(self) -> None:
        if self.can_do and self.preliminary:
            self._confirm_preliminary()
        elif self.can_do:
            self.dismiss("do")
        elif self.readonly and self.result.kind in CHANGES_HOST:
            self.notify(f"--readonly: mlcost-top does not {READONLY_REFUSES[self.result.kind]} "
                        "(start it without --readonly to)", title="y: not done",
                        severity="warning", timeout=6)
        elif self.refused is not None:
            self.notify(self.refused, title="y: mlcostd will refuse it", severity="warning",
                        timeout=8)

    def _confirm_preliminary(self) -> None:
        """The second confirmation of a resize on preliminary evidence: "do_preliminary"."""
        from mlcost_tui.screens.confirm import ConfirmScreen

        r = self.recommendation
        servers = [p for p in self.running or () if p.serves]
        named = "; ".join(f"pid {p.pid} {fmt.short_command(p.command, 40)}" for p in servers)
        evidence = [line for line in savings_text(r).plain.splitlines()
                    if line.startswith("preliminary")] or ["preliminary, confidence low"]
        question = (f"Resize on preliminary evidence?\n\nIts evidence is {evidence[0]}.\n\nThe "
                    "resize stops the instance: every process on it stops"
                    + (f", serving ones too ({named})" if servers else "")
                    + ". The advice may change once the evidence is in.")

        def answered(yes: bool | None) -> None:
            if yes:
                self.dismiss("do_preliminary")

        self.app.push_screen(ConfirmScreen(question, yes="Resize anyway (y)",
                                           no="Not yet (n)"), answered)

    def action_copy(self) -> None:
        if self.copy_text:
            self.app.copy_to_clipboard(self.copy_text)
            self.notify(copy_note(), title="copy", timeout=10)
