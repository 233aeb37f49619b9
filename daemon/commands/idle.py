"""`mlcostd idle`: is this host idle? For scripts that stop idle machines.

Asks the running daemon (GET /v1/idle) and prints its answer: active or idle, since when, why,
and the evidence per GPU and process. Exit status: 0 idle, 1 active, and 1 also whenever the
answer cannot be known (no daemon, a timeout, an error, a history shorter than --for), so
`mlcostd idle --for 30m && sudo shutdown -h now` never stops a host we could not see; 2 for a
bad flag (a --connect no client can use among them).

examples:
  mlcostd idle                          idle right now? (exit 0 idle, 1 active)
  mlcostd idle --for 30m                idle for the whole last 30 minutes?
  mlcostd idle --for 30m --json         the answer as JSON (README: Is this host idle?)
  mlcostd idle --for 30m && sudo shutdown -h now
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from typing import Any

from daemon import clock
from daemon import config as config_module
from daemon.analysis import idleness
from daemon.config import Config
from daemon.sources.safe_text import one_line
from daemon.wire import short_command

IDLE_EXIT = 0
ACTIVE_EXIT = 1  # also: could not tell (fail safe)
USAGE_EXIT = 2  # a bad flag (argparse's status): not 0 either, so `&&` never fires
DEFAULT_TIMEOUT_S = 10.0
MAX_FOR_S = 30 * 86400  # daemon.api.idle.MAX_FOR_S
# The one range of --for, said by --help, by every message about a value outside it (negative,
# past 30d, past what a number holds) and by the README
FOR_RANGE = "from 0 to 30d"
FOR_FORMS = f"{FOR_RANGE}: 0 (idle now, the default) or a number and a unit (e.g. 90s, 30m, 2h)"
COMMAND_CHARS = 60


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--for", dest="for_", default="0", metavar="DURATION",
                        help="answer idle only if the host has been idle for this whole "
                             f"duration, from the recorded history: {FOR_RANGE}, e.g. 90s, "
                             "30m, 2h (default 0: idle now)")
    parser.add_argument("--json", action="store_true",
                        help="print the answer as JSON (the contract in the README)")
    parser.add_argument("--connect", metavar="TARGET",
                        help="the daemon: unix:PATH or http://HOST:PORT (default: the "
                             "[api].socket of the config)")
    parser.add_argument("--token-file", metavar="FILE",
                        help="bearer token for an http:// --connect")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"give up (and answer active) after this long (default "
                             f"{DEFAULT_TIMEOUT_S:g})")


def run(args: argparse.Namespace, config: Config) -> int:
    try:
        try:
            for_s = config_module.parse_duration(args.for_, allowed=FOR_FORMS)
        except config_module.DurationTooLong:
            for_s = math.inf  # past 100 years is past 30d: the one message below
        if for_s > MAX_FOR_S:
            shown = f"{args.for_[:40]}..." if len(args.for_) > 40 else args.for_
            raise ValueError(f"{shown!r} is more than 30d: a duration is {FOR_FORMS}")
    except ValueError as exc:
        print(f"mlcostd idle: --for {exc}", file=sys.stderr)
        return USAGE_EXIT
    if not 0 < args.timeout <= 600:
        print(f"mlcostd idle: --timeout {args.timeout:g} must be more than 0 and at most 600 seconds",
              file=sys.stderr)
        return USAGE_EXIT
    if args.connect:  # a target no client can reach is a mistake in the script, not "active"
        from daemon.client import connection_to

        try:
            connection_to(args.connect, args.timeout)
        except ValueError as exc:
            print(f"mlcostd idle: --connect {one_line(str(exc))}", file=sys.stderr)
            return USAGE_EXIT
    target = args.connect or f"unix:{config_module.socket_path(config)}"
    document = ask(target, args.token_file, for_s, args.timeout)
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        sys.stdout.write(render_text(document))
    return ACTIVE_EXIT if document.get("active") is not False else IDLE_EXIT


def ask(target: str, token_file: str | None, for_s: float, timeout_s: float) -> dict[str, Any]:
    """The daemon's answer; a fail-safe "active" answer with the reason when there is none."""
    from daemon.client import Client, ClientError, read_token_file

    async def main() -> dict[str, Any]:
        token = read_token_file(token_file) if token_file else None
        async with Client(target, token, timeout_s=timeout_s) as client:
            return await asyncio.wait_for(client.idle(for_s), timeout_s)

    try:
        return asyncio.run(main())
    except (asyncio.TimeoutError, TimeoutError):
        reason = f"mlcostd at {target} did not answer within {timeout_s:g} s"
    except ClientError as exc:
        reason = str(exc)
    except Exception as exc:  # fail safe: whatever broke, the answer is active
        reason = f"{type(exc).__name__}: {exc}"
    return idleness.fail_safe(f"cannot tell, so active: {reason}", for_s=for_s)


def render_text(document: dict[str, Any]) -> str:
    """The answer for a person: the verdict and why, since when, then each GPU and process."""
    active = document.get("active") is not False
    out = [f"{'active' if active else 'idle'}: {one_line(str(document.get('reason', '')))}"]
    since = document.get("since")
    facts = []
    if isinstance(since, int | float):
        bound = "at least " if document.get("since_is_history_start") else ""
        facts.append(f"{'active' if active else 'idle'} since {bound}"
                     f"{clock.local_time(since)}")
    facts.append(f"confidence {float(document.get('confidence') or 0):.2f} "
                 f"({one_line(str(document.get('basis', '')))})")
    if document.get("for_s"):
        facts.append(f"asked: idle for {config_module.format_duration(document['for_s'])}")
    out.append("  " + " · ".join(facts))
    for gpu in document.get("gpus") or []:
        state = {True: "busy", False: "idle", None: "unknown"}.get(gpu.get("busy"), "unknown")
        util = gpu.get("utilization")
        util_text = f"{util:3.0f}%" if isinstance(util, int | float) else "  ? "
        last = gpu.get("last_busy")
        last_text = f"  last busy {clock.local_time(last)}" if isinstance(
            last, int | float) else ""
        out.append(f"  GPU {gpu.get('index')}  {state:7} {util_text}{last_text}")
    for proc in document.get("processes") or []:
        command = short_command(one_line(str(proc.get("command") or "")), COMMAND_CHARS)
        state = "active" if proc.get("active") else "idle"
        kind = one_line(str(proc.get("kind") or "?"))
        evidence = "; ".join(one_line(str(e)) for e in proc.get("evidence") or []) or "-"
        out.append(f"  pid {proc.get('pid')}  {state:6} {kind:16} {evidence}  [{command}]")
    return "\n".join(out) + "\n"
