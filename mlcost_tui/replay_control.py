"""mlcost-top's replay controls, beside the App: which recorded tick is shown, `[` `]` a tick,
`{` `}` a minute, space plays. A tick is read in a worker thread and posted as the same
SnapshotArrived message a live poll posts, so the App renders a replayed tick as it renders a
live one. The App binds the keys and calls these."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mlcost_tui.messages import SnapshotArrived

if TYPE_CHECKING:
    from textual.app import App
    from textual.timer import Timer

    from mlcost_tui.sources import ReplaySource

PLAY_PERIOD_MIN_S = 0.1  # space plays one recorded tick per interval, within these bounds
PLAY_PERIOD_MAX_S = 1.0


class ReplayControl:
    """The position in a replay and whether it plays. `redraw` draws the tick shown again
    (its header says whether it plays)."""

    def __init__(self, app: App, source: ReplaySource, redraw: Callable[[], None]) -> None:
        self.app = app
        self.source = source
        self.redraw = redraw
        self.playing = False
        self._play_timer: Timer | None = None

    @property
    def index(self) -> int:
        """The recorded tick shown."""
        return self.source.index

    def goto(self, index: int) -> None:
        """Show the recorded tick at `index` (clamped to the recording)."""
        source = self.source
        if not source.times:
            return
        source.index = source.clamp(index)
        ts = source.times[source.index]
        # exclusive: a newer step cancels an older read still queued
        self.app.run_worker(lambda: self.app.post_message(SnapshotArrived((source.read(ts),))),
                            thread=True, exclusive=True, group="replay", exit_on_error=False,
                            description="read one recorded tick from the replay store")

    def step(self, step: int) -> None:
        self.goto(self.source.index + step)

    def minute(self, step: int) -> None:
        if self.source.times:
            self.goto(self.source.minute_from_here(step))

    def toggle_play(self) -> None:
        """Play from this tick (from the start at the end), or pause."""
        self.playing = not self.playing
        if self._play_timer is not None:
            self._play_timer.stop()
            self._play_timer = None
        if self.playing:
            if self.source.at_end:
                self.source.index = -1  # at the end: play from the start
            period = min(max(self.source.interval_s, PLAY_PERIOD_MIN_S), PLAY_PERIOD_MAX_S)
            self._play_timer = self.app.set_interval(period, self._play_step,
                                                     name="replay play")
            self._play_step()
        else:
            self.redraw()

    def _play_step(self) -> None:
        if self.source.at_end:
            self.toggle_play()  # the end of the recording
            return
        self.goto(self.source.index + 1)
