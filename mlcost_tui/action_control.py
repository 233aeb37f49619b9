"""mlcost-top's actions on the daemon, beside the App: `a` applies a recommendation (a dry run,
then after confirmation the action), `k` stops an idle process the daemon recommends stopping,
`x` snoozes a recommendation and `u` undoes it, `s` takes a snapshot. Each request runs in a
worker; the screens they open (the dry run's dialog, the confirmation) are loaded on the key
press, not with the main screen. The App binds the keys, says why a key cannot act here
(`_refuse`) and calls these."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from daemon.clock import local_time
from daemon.wire import Process, Recommendation
from mlcost_tui import format as fmt
from mlcost_tui import incidents
from mlcost_tui.messages import ActionFinished
from mlcost_tui.panels.recommendations import RecommendationTable

if TYPE_CHECKING:
    from mlcost_tui.app import MlcostTop

SNOOZE_HOURS = 24.0
UNDO_S = 15.0  # how long after a snooze `u` brings the recommendation back
SNAPSHOT_TOAST_S = 6.0  # long enough to read a file name; the demo's exit line repeats it
# How long `a` (and `k`) wait for the daemon's dry run before saying it did not answer: a dry
# run reads the daemon's state (a resize's asks EC2 with DryRun, a second or two); past this
# the daemon is hung or stopped (probe 125 F18: the dialog opened 10 s later, over the help).
DRY_RUN_WAIT_S = 10.0
# ...and for the action itself, once confirmed (a resize stops and starts the instance through
# boto3 and answers when EC2 took the calls)
ACTION_WAIT_S = 30.0


class ActionControl:
    """Requests that change something through the shown host's daemon (`app.client`)."""

    def __init__(self, app: MlcostTop) -> None:
        self.app = app
        # The last snooze, while `u` can undo it: (recommendation, monotonic time of the snooze)
        self.last_snooze: tuple[Recommendation, float] | None = None

    @property
    def can_undo(self) -> bool:
        return self.last_snooze is not None and time.monotonic() - self.last_snooze[1] < UNDO_S

    def apply(self, rec: Recommendation | None) -> None:
        """`a`: the dry run of `rec`'s action, then its dialog (do it, copy, cancel)."""
        if rec is None:
            self.app.notify("no recommendation to apply yet", severity="warning")
            return
        self.start_action(rec, dry_run=True)

    def kill(self, process: Process | None, related: tuple[Recommendation, ...]) -> None:
        """`k`: the dry run of the SIGTERM the daemon recommends for `process`, if it does."""
        now = self.app.now  # a row (or a details screen) can outlive its process
        if process is not None and now is not None and now.ts is not None and \
                all(p.key != process.key for p in now.processes):
            self.app.notify(f"pid {process.pid} has exited (not in mlcostd's view at "
                            f"{local_time(now.ts, date=False)}): nothing to stop",
                            severity="warning")
            return
        for rec in related:
            if rec.action_kind == "sigterm":
                self.start_action(rec, dry_run=True)
                return
        if process is None:
            self.app.notify("select a process first", severity="warning")
            return
        self.app.notify(f"mlcostd stops only processes it recommends stopping (GPUs held "
                        f"idle); pid {process.pid} is not one", severity="warning")

    def snooze(self, rec: Recommendation | None) -> None:
        """`x`: asks, then snoozes `rec` for SNOOZE_HOURS for every client of the daemon."""
        from mlcost_tui.screens.confirm import ConfirmScreen

        if rec is None:
            self.app.notify("no recommendation to snooze yet", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.app.run_worker(self._snooze(rec), exclusive=True, group="snooze",
                                    exit_on_error=False,
                                    description="snooze a recommendation through mlcostd")

        self.app.push_screen(ConfirmScreen(
            f"Snooze this recommendation for {SNOOZE_HOURS:g} h? It leaves the list (here and "
            f"for every client of this mlcostd) until then.\n\n{rec.rule}: {rec.summary}",
            yes=f"Snooze {SNOOZE_HOURS:g} h (y)", no="Keep it (n)"), answered)

    def undo_snooze(self) -> None:
        """`u`: within UNDO_S of a snooze the recommendation is back; after, the snoozed
        recommendations are listed to bring one back (or a toast says none is snoozed)."""
        if self.can_undo:
            work, what = self._undo_snooze(), "undo the last snooze through mlcostd"
        else:
            work, what = self._list_snoozed(), "list the snoozed recommendations from mlcostd"
        self.app.run_worker(work, exclusive=True, group="snooze", exit_on_error=False,
                            description=what)

    def snapshot(self) -> None:
        """`s`: a snapshot of the last 30 minutes through the daemon; a toast says where."""
        self.app.run_worker(self._snapshot(), exclusive=True, group="snapshot",
                            exit_on_error=False,
                            description="take a snapshot of the last 30 minutes through mlcostd")

    def start_action(self, rec: Recommendation, dry_run: bool,
                     accept_preliminary: bool = False) -> None:
        """`accept_preliminary`: the user confirmed a resize on preliminary evidence twice."""
        self.app.run_worker(self._action(rec, dry_run, accept_preliminary), exclusive=True,
                            group="action",
                            exit_on_error=False,
                            description="dry-run or apply a recommendation through mlcostd")

    def finished(self, message: ActionFinished) -> None:
        """What an action's answer says, as a toast."""
        if message.error is not None:
            self.app.notify(f"{'dry run' if message.dry_run else 'action'} failed: "
                            f"{message.error}", severity="error", timeout=8)
        elif not message.dry_run and message.result is not None:
            self.app.notify(message.result.message, title="done", timeout=6)

    # -- the requests (workers) ----------------------------------------------------------------

    async def _snapshot(self) -> None:
        client = self.app.client
        if client is None:
            return
        self.app.notify("taking a snapshot of the last 30 minutes…", timeout=3)
        text, ok = await incidents.take(client)
        self.app.notify(text, title="snapshot", severity="information" if ok else "error",
                        timeout=SNAPSHOT_TOAST_S if ok else 15)

    async def _action(self, rec: Recommendation, dry_run: bool,
                      accept_preliminary: bool = False) -> None:
        """Asks the daemon, saying so at once; waits at most DRY_RUN_WAIT_S (ACTION_WAIT_S for
        the action itself) and says when it did not answer. The dry run's dialog opens only on
        the screen `a` was pressed on: an answer that comes after the user moved on (another
        screen, a dialog, the help) is said in a toast, never popped up over what is open."""
        from daemon.client import ClientError, DaemonUnavailable

        app = self.app
        asked_on = app.screen
        wait = DRY_RUN_WAIT_S if dry_run else ACTION_WAIT_S
        what = fmt.cut(rec.headline or rec.summary, 60)
        # taken back once the daemon answered, it and no other toast (MlcostTop.withdraw)
        asking = app.toast(f"asking mlcostd for {'the dry run' if dry_run else 'the action'}…"
                           f"\n{what}", timeout=wait)
        try:
            assert app.client is not None
            result = await (app.client.apply(rec.id, dry_run, accept_preliminary=True,
                                             timeout_s=wait)
                            if accept_preliminary else
                            app.client.apply(rec.id, dry_run, timeout_s=wait))
        except DaemonUnavailable as exc:
            said = str(exc)
            if exc.timed_out:
                said += (" (hung or stopped?): nothing was done; press a again once it answers"
                         if dry_run else
                         ": it may still do it; the list shows what it did once it answers")
            app.withdraw(asking)  # (held, it would stay up its `wait`)
            app.post_message(ActionFinished(rec.id, None, said, dry_run))
            return
        except ClientError as exc:
            app.withdraw(asking)
            app.post_message(ActionFinished(rec.id, None, str(exc), dry_run))
            return
        app.withdraw(asking)  # answered
        app.post_message(ActionFinished(rec.id, result, None, dry_run))
        if dry_run:
            if app.screen is not asked_on:  # the user moved on while it was asked
                app.notify(f"the dry run came back after you left the screen you asked it "
                           f"on, so no dialog opened: press a again to see it\n{what}",
                           timeout=8)
                return
            from mlcost_tui.screens.action import ActionScreen

            def after(choice: str | None) -> None:
                if choice in ("do", "do_preliminary"):
                    self.start_action(rec, dry_run=False,
                                      accept_preliminary=choice == "do_preliminary")

            running = app.now.processes if app.now is not None else None
            app.push_screen(ActionScreen(rec, result, readonly=app.readonly, running=running),
                            after)

    async def _snooze(self, rec: Recommendation) -> None:
        from daemon.client import ClientError

        app = self.app
        try:
            assert app.client is not None
            until = await app.client.snooze(rec.id, SNOOZE_HOURS)
        except ClientError as exc:
            app.notify(f"snooze failed: {exc}", severity="error", timeout=8)
            return
        table = app.query_one(RecommendationTable)
        table.snoozed_here.add(rec.id)
        if app.now is not None:
            table.show(app.now)
        from mlcost_tui.screens.details import DetailsScreen

        if isinstance(app.screen, DetailsScreen) and app.screen.recommendation is not None:
            app.pop_screen()  # the details of the recommendation just snoozed
        self.last_snooze = (rec, time.monotonic())
        app.refresh_bindings()
        app.set_timer(UNDO_S, app.refresh_bindings, name="undo snooze ends")
        # the time on a line of its own, whole: "until 08:25: daemon…" read as a time cut off
        # (its headline, the advice first: a summary's first 60 characters name its subject)
        app.notify(f"{fmt.cut(rec.headline or rec.summary, 60)}\nback in the list at "
                   f"{local_time(until, seconds=False)} · u: undo", title="snoozed",
                   timeout=UNDO_S)

    async def _undo_snooze(self, rec: Recommendation | None = None) -> None:
        """Bring `rec` (by default the last one snoozed here) back into the list."""
        from daemon.client import ClientError

        app = self.app
        if rec is None and self.last_snooze is not None:
            rec = self.last_snooze[0]
        if rec is None or app.client is None:
            return
        try:
            await app.client.unsnooze(rec.id)
        except ClientError as exc:
            app.notify(f"undo failed: {exc}", severity="error", timeout=8)
            return
        if self.last_snooze is not None and self.last_snooze[0].id == rec.id:
            self.last_snooze = None
        app.refresh_bindings()
        table = app.query_one(RecommendationTable)
        table.snoozed_here.discard(rec.id)
        if app.now is not None:
            table.show(app.now)  # back at once if this snapshot has it; the next poll does too
        app.notify(f"back in the list: {fmt.cut(rec.headline or rec.summary, 60)}", timeout=4)

    async def _list_snoozed(self) -> None:
        """The snoozed recommendations in a list to bring one back (opened only on the screen
        `u` was pressed on), or a toast saying why there is none."""
        from daemon.client import ClientError
        from mlcost_tui.screens.snoozed import SnoozedScreen

        app = self.app
        if app.client is None:
            return
        asked_on = app.screen
        try:
            snoozed = await app.client.snoozed_recommendations()
        except ClientError as exc:
            app.notify(f"cannot list the snoozed recommendations: {exc}", severity="error",
                       timeout=8)
            return
        if not snoozed:
            app.notify("no recommendation is snoozed on this mlcostd (x on the main screen "
                       "snoozes the highlighted one; u then brings it back)", timeout=5)
            return
        if app.screen is not asked_on:  # the user moved on meanwhile: no list over it
            return

        def chosen(rec: Recommendation | None) -> None:
            if rec is not None:
                app.run_worker(self._undo_snooze(rec), exclusive=True, group="snooze",
                               exit_on_error=False,
                               description="bring a snoozed recommendation back through "
                                           "mlcostd")

        app.push_screen(SnoozedScreen(snoozed), chosen)
