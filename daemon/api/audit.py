"""The audit trail and the gate of recommendation actions (POST /v1/recommendations/{id}/apply).

mlcostd runs as root and an action may SIGTERM a process or resize the instance, so every
apply — the dry run, the real run, a refusal, a failure — is written to the log and to the
store's events (kind "action") with who asked: "uid N" for a unix-socket peer (SO_PEERCRED),
"token" for a TCP client (TCP requires the bearer token). And:

- a real run needs a dry run of the same recommendation by the same caller within
  DRY_RUN_VALID_S; each dry run allows one real run;
- one real action per recommendation at a time: while one runs, another is refused (409), so
  ten concurrent applies send one SIGTERM.

Both checks run on the event loop, which serializes them; only the action itself runs in a
thread. One gate per daemon, shared by its listeners (unix socket and TCP).
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from daemon import clock

log = logging.getLogger(__name__)

DRY_RUN_VALID_S = 600.0  # a real run must follow its dry run within this
EVENT_KIND = "action"


class ActionRefused(Exception):
    """The gate refuses this apply; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def peer(transport: Any) -> str:
    """Who is on the other end of an API connection: "uid N" (unix socket) or "token" (TCP)."""
    if transport is None:
        return "unknown"
    if isinstance(transport.get_extra_info("peername"), tuple):
        return "token"  # TCP: the guard let it in with the bearer token
    sock = transport.get_extra_info("socket")
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
    except (AttributeError, OSError):
        return "unknown"
    return f"uid {uid}"


class ActionGate:
    """Dry runs seen, real actions running, and the record of each apply."""

    def __init__(self, record: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._record = record  # writes one event to the store (facts.write_event)
        self._dry_runs: dict[tuple[str, str], float] = {}  # (rec id, who) -> monotonic time
        self._running: set[str] = set()  # rec ids with a real action in flight
        self._last_at = 0.0  # events are keyed by their time: each record gets its own ms

    def begin(self, rec: dict[str, Any], who: str, dry_run: bool) -> None:
        """On the loop, before the action runs. Raises ActionRefused (and records it)."""
        rec_id = str(rec.get("id"))
        if dry_run:
            return
        try:
            if rec_id in self._running:
                raise ActionRefused(f"recommendation {rec_id} is being applied now; wait for "
                                    "that to finish", 409)
            seen = self._dry_runs.get((rec_id, who))
            if seen is None or time.monotonic() - seen > DRY_RUN_VALID_S:
                raise ActionRefused(
                    f"dry run first: POST /v1/recommendations/{rec_id}/apply with "
                    f'{{"dry_run": true}}, read what it would do, then apply within '
                    f"{DRY_RUN_VALID_S / 60:g} minutes", 409)
        except ActionRefused as exc:
            self._audit(rec, who, dry_run, "refused", str(exc), exc.status)
            raise
        del self._dry_runs[(rec_id, who)]  # one dry run, one real run
        self._running.add(rec_id)
        log.info("audit: %s action %s on recommendation %s (%s): starting", who,
                 (rec.get("action") or {}).get("kind"), rec_id, rec.get("target"))

    def end(self, rec: dict[str, Any], who: str, dry_run: bool, *,
            result: dict[str, Any] | None = None, error: str | None = None,
            status: int | None = None) -> None:
        """On the loop, after the action returned (`result`) or failed (`error`, `status`)."""
        rec_id = str(rec.get("id"))
        if dry_run:
            if result is not None:
                self._dry_runs[(rec_id, who)] = time.monotonic()
                self._forget_old()
        else:
            self._running.discard(rec_id)
        if result is not None:
            outcome = "dry run" if dry_run else ("done" if result.get("done") else "not done")
            self._audit(rec, who, dry_run, outcome, str(result.get("message", "")), 200)
        else:
            self._audit(rec, who, dry_run, "failed", error or "", status)

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - DRY_RUN_VALID_S
        for key in [k for k, seen in self._dry_runs.items() if seen < cutoff]:
            del self._dry_runs[key]

    def _audit(self, rec: dict[str, Any], who: str, dry_run: bool, outcome: str,
               message: str, status: int | None) -> None:
        action = rec.get("action") or {}
        kind = str(action.get("kind") or "none")
        what = "dry run of" if dry_run else "action"
        log.info("audit: %s %s %s on recommendation %s (%s): %s%s", who, what, kind,
                 rec.get("id"), rec.get("target"), outcome, f": {message}" if message else "")
        if self._record is None:
            return
        now = self._last_at = max(clock.now(), self._last_at + 0.001)
        try:
            self._record({
                "kind": EVENT_KIND, "target": str(rec.get("target") or rec.get("id")),
                "started_at": now, "ended_at": now, "cost_so_far": None,
                "detail": {"who": who, "recommendation": rec.get("id"), "rule": rec.get("rule"),
                           "action": kind, "dry_run": dry_run, "outcome": outcome,
                           "message": message, "status": status}})
        except Exception:  # the trail is in the log already; the store says why in health
            log.exception("cannot record the action in the store")
