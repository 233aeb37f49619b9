"""Typed messages: what the poll worker hands to the UI, one frozen snapshot at a time."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from daemon.wire import ActionResult, Now


@dataclass(frozen=True)
class HostSnapshot:
    """One daemon's state as last polled: `now` when it answered, `error` when it did not."""

    target: str
    now: Now | None
    error: str | None
    latency_s: float
    received_at: float
    attempt: int = 0  # failed polls in a row (0 when it answered)
    stalled: bool = False  # the error is a daemon that took the request and did not answer
    # With an error: when (fmt.clock) the daemon last answered, i.e. how old `now` is (None:
    # it never has). The header says "as of" that time and the panels are dimmed.
    answered_at: float | None = None
    # The daemon answered and turned us away (HTTP 401/403: a missing or wrong bearer token):
    # it is there, and asking again will not let us in.
    refused: bool = False

    @property
    def stale(self) -> bool:
        """It shows figures from an earlier answer: the daemon did not answer this time."""
        return self.error is not None and self.now is not None


class SnapshotArrived(Message):
    """A poll finished: one snapshot per connected daemon (one, unless in fleet mode)."""

    def __init__(self, hosts: tuple[HostSnapshot, ...]) -> None:
        super().__init__()
        self.hosts = hosts


class ActionFinished(Message):
    """A recommendation's action was dry-run or performed (or failed: `error`)."""

    def __init__(self, rec_id: str, result: ActionResult | None, error: str | None,
                 dry_run: bool) -> None:
        super().__init__()
        self.rec_id = rec_id
        self.result = result
        self.error = error
        self.dry_run = dry_run
