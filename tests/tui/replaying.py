"""What the replay tests of mlcost-top share: a copy of a live daemon's store to replay, and
stepping the replay to a recorded tick."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from simhost import pilot_wait_for

from mlcost_tui.app import MlcostTop


def vacuum_into(db: Path, copy: Path) -> None:
    """A consistent copy of the store `db` (a daemon may still write it) at `copy`."""
    source = sqlite3.connect(db)
    try:
        source.execute("VACUUM INTO ?", (str(copy),))
    finally:
        source.close()


async def step_to(app: MlcostTop, pilot: Any, times: list[float], ts: float) -> None:
    """Step the app's replay to the recorded tick at `ts` and wait until it shows it."""
    control = app.replay_control
    assert control is not None
    control.goto(times.index(ts))
    await pilot_wait_for(pilot, lambda: app.now is not None and app.now.ts == ts,
                         what=f"the recorded tick at {ts}")
    await pilot.pause()
