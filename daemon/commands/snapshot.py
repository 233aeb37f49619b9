"""`mlcostd snapshot`: a time range of the store as a snapshot file (a store of its own), its
HTML report, an upload to S3; `--render FILE.db` makes the HTML report of an existing file.

With a daemon running, the snapshot is taken through its API (POST /v1/snapshots: the daemon
writes it into its snapshots folder; `--out` downloads it from there). With none, or with
`--db FILE` and no `--socket` (that file, not the running daemon's store), it is taken
directly from the store.
Either way it is the same code: daemon.runtime.snapshots.take_snapshot.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from daemon import clock
from daemon import config as config_module
from daemon.commands.startup_signals import Stopped
from daemon.config import Config
from daemon.config.values import DURATION_FORMS
from daemon.sources.safe_text import one_line
from daemon.store.files import private_folder

EMPTY_RANGE_STATUS = 422  # POST /v1/snapshots: the range holds no tick (nothing written)
# POST /v1/snapshots refused the request (400: no upload target, a bad range) or its range
REFUSED_STATUSES = (400, EMPTY_RANGE_STATUS)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows `--upload` as the flag it is: argparse writes an optional value with an empty
    metavar as `--upload ` (the value is accepted only to answer an old-style URL clearly)."""

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        return "" if action.metavar == "" else super()._format_args(action, default_metavar)

    def _format_usage(self, *args: Any, **kwargs: Any) -> str:
        return super()._format_usage(*args, **kwargs).replace(" ]", "]")

    def _format_action_invocation(self, action: argparse.Action) -> str:
        return super()._format_action_invocation(action).rstrip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", default="30m", metavar="DURATION",
                        help="how far back the snapshot reaches from --until (default 30m)")
    parser.add_argument("--until", metavar="TIME",
                        help="where it ends: Unix seconds or ISO 8601 (default: now; a "
                             "store no daemon records into: its last sample)")
    parser.add_argument("--out", metavar="FILE",
                        help="write the snapshot here, or into this folder under its own "
                             "name (default: the snapshots folder, [snapshots].folder or "
                             "snapshots/ beside the database); a missing folder is refused, "
                             "not created, and an existing file is never replaced")
    parser.add_argument("--html", action="store_true",
                        help="also write the HTML report beside it (FILE.html)")
    # A flag, not a place: with a daemon running the daemon uploads with its own credentials,
    # so the target is its config's, never the caller's. An old-style URL gets a clear error.
    parser.add_argument("--upload", nargs="?", const=True, default=False, metavar="",
                        help="also upload the file(s) to S3, to [snapshots].upload: the running "
                             "daemon's, which uploads with its own credentials; with none "
                             "running, this config's (boto3 credentials; "
                             "[snapshots].sse_kms_key_id and storage_class apply); to put a "
                             "copy elsewhere, `aws s3 cp` it")
    parser.add_argument("--render", metavar="FILE.db",
                        help="only write the HTML report of an existing snapshot or store "
                             "(to --out, default FILE.html)")
    parser.add_argument("--socket", metavar="FILE",
                        help="ask the daemon at this API socket (default: [api].socket); "
                             "with --db and no --socket no daemon is asked: that file is read")
    parser.add_argument("--json", action="store_true", help="print what was done as JSON")


def run(args: argparse.Namespace, config: Config) -> int:
    if args.render:
        return _render(args)
    if args.upload is not True and args.upload is not False:
        print(f"mlcostd snapshot: --upload {args.upload!r}: --upload takes no target; the "
              "target is [snapshots].upload in the config (the daemon's, when one is running), "
              "so neither a client nor a request chooses where root's credentials upload; to "
              f"put a copy elsewhere, `aws s3 cp FILE {args.upload}`", file=sys.stderr)
        return 2
    from daemon.store.snapshot import MAX_SINCE_S

    try:
        span = config_module.parse_duration(args.since)
        if span < 1:
            raise ValueError(f"{args.since!r} must be longer than 0 s (at least 1 s); give a "
                             f"duration ({DURATION_FORMS})")
        if span > MAX_SINCE_S:
            raise ValueError(
                f"{args.since!r} is longer than a snapshot covers (at most "
                f"{config_module.format_duration(MAX_SINCE_S)}: an incident, not a copy of "
                "the store); for a longer range, `mlcostd report --since` it, or copy the "
                "store with `sqlite3 DB .backup FILE`")
    except ValueError as exc:
        print(f"mlcostd snapshot: --since {exc}", file=sys.stderr)
        return 2
    try:
        until = clock.parse_time(args.until) if args.until else clock.now()
        if until > clock.now() + 60:
            raise ValueError(f"{args.until!r} is in the future; give a past time: "
                             f"{clock.TIME_FORMS}")
    except ValueError as exc:
        print(f"mlcostd snapshot: --until {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else None
    if out is not None and args.out.endswith("/") and not (out.is_dir()
                                                           and not out.is_symlink()):
        print(f"mlcostd snapshot: --out {one_line(args.out)[:200]}: {_not_a_folder(out)}",
              file=sys.stderr)
        return 2
    if out is not None and out.is_dir() and not out.is_symlink():
        # a folder: the file goes into it, under the name the daemon would give it
        from daemon.store.snapshot import free_path, snapshot_name

        out = free_path(out, snapshot_name(os.uname().nodename, until))
    if out is not None and not out.parent.is_dir():  # a typo must not create folders as root
        print(f"mlcostd snapshot: --out {one_line(str(out))[:200]}: there is no folder "
              f"{one_line(str(out.parent))[:200]}; create it first, or give a path in one "
              "that exists", file=sys.stderr)
        return 2
    refused = _existing_out(out, args.html) if out is not None else None
    unsafe = _unsafe_folder(out.parent) if out is not None and not refused else None
    if unsafe:
        print(f"mlcostd snapshot: {unsafe}", file=sys.stderr)
        return 2
    if refused:
        print(f"mlcostd snapshot: --out {refused}", file=sys.stderr)
        return 2
    if args.socket:
        config = config_module.with_overrides(config, "api", socket=args.socket)
    # --db alone names the store to read: the daemon [api].socket finds would snapshot its own.
    # With --socket too, that daemon is asked first and --db is read when none answers.
    asked = args.socket or not args.db
    result = _through_api(config, span, until, args.html, args.upload, out) if asked else None
    if result is None:
        from daemon.runtime.snapshots import take_snapshot
        from daemon.store.reader import no_store_at
        from daemon.store.snapshot import (
            BadSnapshotRequest,
            EmptySnapshotRange,
            NotAStore,
            SnapshotError,
        )

        # No daemon took it: this command writes and uploads it, to this config's target. (A
        # daemon uploads to its own config's, and answers a 400 when it has none.)
        if args.upload and not config.snapshots.upload:
            print(f"mlcostd snapshot: --upload, but no daemon answers and the config "
                  f"({config.source}) sets no [snapshots].upload; add upload = "
                  "\"s3://BUCKET/PREFIX\" under [snapshots], or pass --config FILE",
                  file=sys.stderr)
            return 2
        db = config_module.db_path(config)
        if not Path(db).is_file():  # nothing to read: a refusal (2), as in `mlcostd report`
            print(f"mlcostd snapshot: {no_store_at(db)}; start the recorder (`mlcostd run`) or "
                  "pass --db with the daemon's database (`mlcostd run --simulate demo` records "
                  f"into {config_module.simulated_db_path('demo')})", file=sys.stderr)
            return 2
        # The shape `mlcostd report` and `--render` check, before any query reads a row: a
        # file handed around may hold a view where a table belongs (a recursive one ran the
        # copy for its whole minute), be damaged, or come from a newer mlcost (probe 126 F2).
        refused = _refused_store(db)
        if refused:
            print(f"mlcostd snapshot: {refused}", file=sys.stderr)
            return 2
        if not args.until:  # no daemon answers: a stopped store's range ends at its last tick
            until = _last_recorded(db) or until
        try:
            with _stopped_on_signal() as stopped:
                result = take_snapshot(config, since=until - span, until=until, out=out,
                                       html=args.html,
                                       upload=config.snapshots.upload if args.upload else None)
        except (KeyboardInterrupt, Stopped) as exc:  # (the file begun is removed)
            return _said_stopped(exc.signum if isinstance(exc, Stopped) else signal.SIGINT)
        except SnapshotError as exc:
            if stopped:  # a signal cut a query off: SQLite says "interrupted"
                return _said_stopped(stopped[0])
            print(f"mlcostd snapshot: {exc}", file=sys.stderr)
            # what was asked is refused (2: a file that is no store, as `mlcostd report`); a
            # store or a disk that failed is 1
            return 2 if isinstance(exc, EmptySnapshotRange | BadSnapshotRequest | NotAStore) \
                else 1
        result["through"] = f"directly from {db}"
    elif "error" in result:
        print(f"mlcostd snapshot: {result['error']}", file=sys.stderr)
        # refused (400: no upload target, a bad range; 422: no tick in it) is 2, as the same
        # refusals are without a daemon; a copy that failed is 1
        return 2 if result.get("status") in REFUSED_STATUSES else 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        sys.stdout.write(describe(result))
    return 0 if all(u.get("ok") for u in result.get("upload") or []) else 1


def _existing_out(out: Path, html: bool) -> str | None:
    """Why `out` (and its report, with --html) may not be written, or None. A snapshot never
    replaces a file: `--out /etc/passwd` run as root wrote a store over it, `--out` at the
    daemon's own store replaced the store, and `--out x.html --html` wrote the report over
    the snapshot it was made from."""
    from daemon.store.snapshot import HTML_SUFFIX

    shown = one_line(str(out))[:200]
    if html and out.with_suffix(HTML_SUFFIX) == out:
        return (f"{shown}: with --html the report is written beside the snapshot, as "
                f"FILE{HTML_SUFFIX}; name the snapshot FILE.db")
    for path in (out, out.with_suffix(HTML_SUFFIX)) if html else (out,):
        if os.path.lexists(path):
            # (the report's path is not what --out said: name it as what it is)
            which = (f"{shown}: the report beside it, {one_line(str(path))[:200]}," if path != out
                     else one_line(str(path))[:200])
            return (f"{which} exists; a snapshot never replaces a file: give a new name (or a "
                    "folder: the file goes into it under a new name), or remove it first")
    return None


def _not_a_folder(folder: Path) -> str:
    """Why FOLDER/ (an --out that names a folder) is none to write into: nothing there, a
    symbolic link (to a folder, even: mlcostd runs as root and follows no link it did not
    make), or a file."""
    shown = one_line(str(folder))[:200]
    if folder.is_symlink():
        try:
            target = one_line(os.readlink(folder))[:200]
        except OSError:
            target = "?"
        return (f"{shown} is a symbolic link (to {target}), not a folder: mlcostd runs as root "
                "and never follows a link it did not make; give the folder itself")
    if os.path.lexists(folder):
        return f"{shown} is not a folder; give a folder, or a file name without the /"
    return f"there is no folder {shown}; create it first (a folder is not created)"


def _unsafe_folder(folder: Path) -> str | None:
    """Why root may not write into `folder` (daemon.store.files.check_folder: another user's
    link on its path, or a folder on it another user owns or can write, unless sticky), as
    a line to print; None when it may."""
    from daemon.store.files import RefusedFile, check_folder

    try:
        check_folder(folder, "--out folder", "give --out a path in a folder of your own that no "
                                       "other user can write")
    except RefusedFile as exc:
        return one_line(str(exc))
    return None


def _through_api(config: Config, span: float, until: float, html: bool, upload: bool,
                 out: Path | None) -> dict[str, Any] | None:
    """Take it through the running daemon; None when no daemon answers (go direct)."""
    from daemon.client import ApiError, Client, ClientError, DaemonUnavailable

    socket = config_module.socket_path(config)
    if not socket.exists():
        return None

    async def main() -> dict[str, Any] | None:
        async with Client(f"unix:{socket}") as client:
            try:
                result = await client.take_snapshot(span, until, html, upload)
            except DaemonUnavailable:
                return None
            except ApiError as exc:
                return {"error": exc.message, "status": exc.status}
            result["through"] = f"the daemon at unix:{socket}"
            if out is not None:
                try:
                    private_folder(out.parent)
                    await client.download_snapshot(result["name"], out)
                    result["path"] = str(out)
                    if result.get("html"):
                        html_out = out.with_suffix(".html")
                        await client.download_snapshot(Path(result["html"]).name, html_out)
                        result["html"] = str(html_out)
                except (ClientError, OSError) as exc:
                    return {"error": f"the daemon wrote {result['path']}, but copying it to "
                                     f"{out} failed: {exc}"}
            return result

    return asyncio.run(main())


def _refused_store(db: Path) -> str | None:
    """Why the store file `db` is not read (daemon.store.shape.check_shape: a view or a virtual
    table where a table belongs, a column missing, a damaged file, a schema this mlcost does
    not read), in the line `mlcostd report` says; None when it may be read."""
    from daemon.store.reader import StoreReader
    from daemon.store.shape import READ_ERRORS, check_shape, read_failure

    try:
        reader = StoreReader(str(db), tidy=True)
        try:
            check_shape(reader)
        finally:
            reader.close()
    except READ_ERRORS as exc:
        return read_failure(db, exc)
    return None


@contextlib.contextmanager
def _stopped_on_signal() -> Iterator[list[int]]:
    """Within the block SIGTERM raises Stopped (as SIGINT raises KeyboardInterrupt), so the
    snapshot begun is removed (write_snapshot removes its temporary file on any exception)
    rather than left behind by a process ended without a word. A signal that lands while
    SQLite runs a query ends it ("interrupted": the copy's progress handler raised, which
    sqlite3 turns into an interrupt) and is listed in the list yielded."""
    stopped: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield stopped
        return

    def on_signal(signum: int, _frame: object) -> None:
        stopped.append(signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Stopped(signum)

    previous = {signum: signal.signal(signum, on_signal)
                for signum in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler)}
    try:
        yield stopped
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _said_stopped(signum: int) -> int:
    status = 128 + signum
    print(f"mlcostd snapshot: stopped by {signal.Signals(signum).name}: no snapshot was written "
          f"(the file begun is removed); exiting {status}", file=sys.stderr)
    return status


def _last_recorded(db: Path) -> float | None:
    """The last time a store no daemon records into holds anything for; None for a store
    being recorded, an empty one, or one that cannot be read (the snapshot then says why)."""
    from daemon.store import queries
    from daemon.store.reader import StoreReader
    from daemon.store.shape import READ_ERRORS

    if not Path(db).exists():
        return None
    try:
        reader = StoreReader(str(db), tidy=True)
        try:
            recorded = queries.recorded_range(reader)
            return None if reader.recording or recorded is None else recorded[1]
        finally:
            reader.close()
    except READ_ERRORS:
        return None


def describe(result: dict[str, Any]) -> str:
    """What was written, for a person."""
    first = result.get("first_tick")
    since = float(result["since"])
    shown = float(first) if isinstance(first, int | float) else since  # the ticks' own range
    # a store that began inside the range: its first tick came more than two of its intervals
    # after the range's start (a store recording before the range has one within one)
    ticks = int(result.get("ticks") or 0)
    interval = (float(result["until"]) - shown) / (ticks - 1) if ticks > 1 else 1.0
    young = shown - since > max(2 * interval, 2.0)
    lines = [f"snapshot: {result['path']}",
             f"  {result['ticks']} ticks from {clock.local_time(shown)} to "
             f"{clock.local_time(result['until'])}, {result['bytes'] / 1e6:.2f} MB, written in "
             f"{result.get('seconds', 0):.2f} s ({result.get('through', '')})"]
    if young:
        lines.append(f"  (the range asked for began {clock.local_time(since)}: "
                     "nothing was recorded before its first tick)")
    if result.get("html"):
        lines.append(f"html:     {result['html']}")
    uploads = result.get("upload") or []
    for upload in uploads:
        lines.append(f"uploaded: {upload['url']}" if upload["ok"] else
                     f"upload failed: {upload['error']}")
    if any(u.get("credentials") for u in uploads):
        # The daemon did the upload: this shell's AWS settings (names only) played no part.
        shell = sorted(name for name in os.environ if name.startswith("AWS_"))[:6]
        lines.append("note:     the daemon uploaded with its own AWS credentials, not this "
                     "shell's" + (f" ({', '.join(shell)} played no part)" if shell else "")
                     + "; README \"Uploading snapshots\" says how to set them")
    lines.append(f"replay:   mlcost-top --replay {result['path']}")
    return "\n".join(lines) + "\n"


def _render(args: argparse.Namespace) -> int:
    from daemon.replay import Replay, ReplayError
    from daemon.runtime.snapshots import render_html_file
    from daemon.store.files import page_problem
    from daemon.store.shape import READ_ERRORS, read_failure

    source = Path(args.render)
    try:
        target = _render_target(source, args.out)
    except ValueError as exc:
        print(f"mlcostd snapshot --render: --out {exc}", file=sys.stderr)
        return 2
    # before anything is read: a page never replaces the store it is made from, a database,
    # or any file that is not a page of ours (`--out` at a live store broke it)
    problem = page_problem(target, (source,))
    if problem is not None:
        flag = "--out " if args.out else ""
        print(f"mlcostd snapshot --render: {flag}{one_line(problem)[:400]}", file=sys.stderr)
        return 2
    try:
        Replay(source).close()  # the same checks as replay: a clear error, never a traceback
    except ReplayError as exc:
        print(f"mlcostd snapshot --render: {exc}", file=sys.stderr)
        return 2
    try:
        render_html_file(source, target)
    except READ_ERRORS as exc:  # a row of the wrong type, a query past its deadline ...
        print(f"mlcostd snapshot --render: {read_failure(source, exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mlcostd snapshot --render: cannot write {target}: {exc.strerror}",
              file=sys.stderr)
        return 1
    print(f"html: {target}")
    return 0


def _render_target(source: Path, out: str | None) -> Path:
    """Where --render writes: --out, or SOURCE.html beside the file without it, or
    FOLDER/SOURCE-NAME.html for an --out that is a folder (as a snapshot goes into one).
    ValueError for a FOLDER/ that is not there."""
    from daemon.store.snapshot import HTML_SUFFIX

    if not out:
        return source.with_suffix(HTML_SUFFIX)
    target = Path(out)
    if target.is_dir() and not target.is_symlink():
        return target / source.with_suffix(HTML_SUFFIX).name
    if out.endswith("/"):
        raise ValueError(f"{one_line(out)[:200]}: {_not_a_folder(target)}")
    return target
