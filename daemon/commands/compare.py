"""Compare before and after: two profiles, snapshots, stores or ranges of the live store,
figure by figure, each with a verdict (better, worse, within noise; inconclusive from too few
stack samples) whose noise is estimated from the recorded samples, and which recommendations
are new, gone or changed.

A and B are each one of:
  DIR or FILE.json    a profile (`mlcostd profile` writes DIR/profile.json) or a report
                      document (`mlcostd report --json > FILE.json`)
  FILE.db             a snapshot or any mlcostd store: its own recorded range
  RANGE               a range of the live store (--db, else [daemon].db):
                        1h                  the last hour
                        7d-ago/1h           the hour that ended 7 days ago
                        2026-12-01T09:00..2026-12-01T10:00   from .. to (ISO 8601 local
                                            time, ...Z for UTC, or Unix seconds; `now`)

examples:
  mlcostd compare before/ after/                   two profiles (DIRs with profile.json)
  mlcostd compare old.db new.db --html diff.html   two snapshots, and an HTML page
  mlcostd compare --baseline 7d-ago/1h             the last hour against the same hour a week ago
  mlcostd compare 2h-ago/1h 1h --job train         one job: the hour before against the last
  mlcostd compare --previous train                 job `train`'s last run against its run before
  mlcostd compare --previous 4242:1733130000.123   a process's run against the previous run of
                                                   the same command line
  mlcostd compare A B --json                       the JSON document described in the README

exit status: 0 compared (whatever the verdict), 1 an input cannot be read, 2 a usage error
(an A or B that is neither a range nor a file or folder, an --html that is one of the inputs,
or a file of an input's profile folder, is one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import sys
import textwrap
from pathlib import Path
from typing import Any

from daemon import clock
from daemon import config as config_module
from daemon.analysis import compare as analysis
from daemon.analysis.compare import change_text, figure_text
from daemon.commands.gates import MAX_PROFILE_BYTES
from daemon.config import Config
from daemon.sources.safe_text import lines, one_line
from pricing.http import loads_finite
from pricing.small_file import TOO_LARGE, SmallFileError, read_small_file

SQLITE_MAGIC = b"SQLite format 3\x00"
WIDTH = 80
# What `mlcostd profile` writes in its --out folder, and what SQLite keeps beside a store.
PROFILE_FILES = ("profile.json", "profile.html", "summary.md", "profile.db")
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")
EXPECTED = ("pass a store or snapshot (FILE.db, an SQLite file mlcostd wrote), a profile (the "
            "folder `mlcostd profile --out` wrote, or its profile.json) or a document "
            "`mlcostd report --json` printed")


class CompareInputError(Exception):
    """An input that cannot be compared; the message says which and why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", nargs="?", metavar="A",
                        help="before: a profile (DIR or FILE.json), a store or snapshot "
                             "(FILE.db), or a RANGE of the live store")
    parser.add_argument("b", nargs="?", metavar="B",
                        help="after: the same forms (default with --baseline: the range of "
                             "the baseline's length ending now)")
    parser.add_argument("--baseline", metavar="RANGE",
                        help="A as a range of the live store, e.g. 7d-ago/1h; B defaults to "
                             "the last range of that length")
    parser.add_argument("--job", metavar="NAME",
                        help="only this job's processes (their job or owner label) on both "
                             "sides, and the GPUs they held")
    parser.add_argument("--previous", metavar="JOB|PID:START",
                        help="in the live store: the latest run of this job (or of this "
                             "process's command line) against the run before it")
    parser.add_argument("--json", action="store_true",
                        help="print the JSON document described in the README")
    parser.add_argument("--html", metavar="FILE",
                        help="also write a self-contained HTML page of the comparison")
    parser.add_argument("--seed", type=int, default=analysis.SEED,
                        help="seed of the bootstrap (default: fixed, so a comparison repeats)")


# -- ranges -------------------------------------------------------------------------------


def parse_range(text: str, now: float) -> tuple[float, float]:
    """RANGE -> (since, until): 'D' (the last D), 'AGO-ago/D' (the D that ended AGO before
    now), 'START..END' (times as clock.parse_time reads them; END may be 'now').
    ValueError says the forms."""
    forms = "use 1h, 7d-ago/1h or 2026-12-01T09:00..2026-12-01T10:00"
    text = text.strip()
    try:
        if ".." in text:
            start, _, end = text.partition("..")
            since = clock.parse_time(start)
            until = now if end.strip() in ("", "now") else clock.parse_time(end)
        elif "/" in text:
            ago, _, length = text.partition("/")
            if not ago.endswith("-ago"):
                raise ValueError(f"before the '/' comes how long ago it ended, ending in -ago, "
                                 f"not {ago[:40]!r}")
            until = now - config_module.parse_duration(ago[:-4])
            since = until - config_module.parse_duration(length)
        else:
            until = now
            since = now - config_module.parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"{text[:80]!r} is not a range ({exc}); {forms}") from None
    if not until > since:
        raise ValueError(f"{text[:80]!r} ends before it starts; {forms}")
    return since, until


# -- inputs -------------------------------------------------------------------------------


def _document_from_store(path: Path, since: float | None, until: float | None,
                         config: Config) -> dict[str, Any]:
    """The report document of a store over [since, until], or over its own range: a
    snapshot's recorded range, else from its first to its last tick."""
    from daemon.commands import report
    from daemon.store import queries
    from daemon.store.errors import damaged_store, is_damaged
    from daemon.store.reader import StoreReader
    from daemon.store.shape import READ_ERRORS, StoreShapeError, check_shape, read_failure
    from daemon.store.snapshot import SnapshotError, read_facts

    try:
        if since is None or until is None:
            facts = read_facts(path)
            if facts and isinstance(facts.get("since"), int | float) and isinstance(
                    facts.get("until"), int | float):
                since, until = float(facts["since"]), float(facts["until"])
        reader = StoreReader(str(path), tidy=True)
        try:
            check_shape(reader)
            if since is None or until is None:
                row = reader.query("SELECT min(ts) AS lo, max(ts) AS hi FROM ticks")[0]
                if row["lo"] is None:
                    raise CompareInputError(f"{path}: the store holds no samples")
                since, until = row["lo"] / 1000, row["hi"] / 1000
            span = max(until - since, 1.0)
            document = report.build(reader, span, until=since + span, config=config)
            # when its recording began (a snapshot's range may reach before it)
            document["window"]["first_recorded"] = queries.first_recorded(reader)
        finally:
            reader.close()
    except (StoreShapeError, SnapshotError) as exc:
        said = str(exc)  # most name the file first themselves
        raise CompareInputError(said if said.startswith(str(path)) else f"{path}: {said}"
                                ) from None
    except sqlite3.DatabaseError as exc:
        if is_damaged(exc):
            raise CompareInputError(damaged_store(path, exc)) from None
        raise CompareInputError(f"{path} is not an mlcostd store "
                                f"({' '.join(str(exc).split())[:160]})") from None
    except READ_ERRORS as exc:
        raise CompareInputError(read_failure(path, exc)) from None
    window = document["window"]
    if not window.get("ticks"):
        recorded = window.get("recorded")  # what it holds, in the words report and snapshot use
        held = queries.held_range(str(path), (recorded["first"], recorded["last"])
                                  if isinstance(recorded, dict) else None)
        raise CompareInputError(f"{path}: no samples between {clock.local_time(since)} and "
                                f"{clock.local_time(until)}; {held}")
    return document


# Longer than any path the kernel takes (PATH_MAX, with its NUL): never a file, so never looked
# up (a 300-character name raised ENAMETOOLONG out of Path.exists, a traceback).
PATH_MAX_CHARS = 4095


def _on_disk(spec: str) -> Path | None:
    """`spec` as a path when something exists there, else None: never an error, whatever the
    text (too long for the kernel, a component over NAME_MAX, a NUL byte), and nothing over
    PATH_MAX_CHARS is looked up at all."""
    if not spec or len(spec) > PATH_MAX_CHARS or "\x00" in spec:
        return None
    path = Path(spec)
    try:
        return path if path.exists() else None
    except (OSError, ValueError):
        return None


def _looks_like_a_path(spec: str) -> bool:
    return Path(spec).suffix in (".json", ".db") or os.sep in spec and "-ago/" not in spec


def range_problem(spec: str, now: float) -> str | None:
    """Why `spec` is neither something on disk nor a range (a usage error), or None: when it
    is one, or when it reads as a path (a missing file: `load` says so, as an input that
    cannot be read)."""
    if _on_disk(spec) is not None or _looks_like_a_path(spec):
        return None
    try:
        parse_range(spec, now)
    except ValueError as exc:
        return f"{exc}; nor is it a file or folder"
    return None


def same_range(a: str, b: str, now: float) -> tuple[float, float] | None:
    """The range both A and B name, when they name the same range of the live store (every
    figure would be 'within noise'); None otherwise, or when either is a file or folder."""
    if _on_disk(a) is not None or _on_disk(b) is not None:
        return None
    try:
        first, second = parse_range(a, now), parse_range(b, now)
    except ValueError:
        return None
    return first if first == second else None


def range_document(db: Path, spec: str, config: Config,
                   now: float) -> tuple[str, dict[str, Any]]:
    """(label, report document) of a RANGE of the store `db` (never a file: for callers that
    must not open paths they are given, such as `mlcostd mcp`). CompareInputError says why
    not."""
    try:
        since, until = parse_range(spec, now)
    except ValueError as exc:
        if _looks_like_a_path(spec):
            raise CompareInputError(f"{spec[:80]!r} is a path: only ranges of the daemon's "
                                    "store are compared here, never files; use 1h, 7d-ago/1h "
                                    "or 2026-12-01T09:00..2026-12-01T10:00") from None
        raise CompareInputError(str(exc)) from None
    return (f"{clock.local_time(since)} to {clock.local_time(until)}",
            _document_from_store(db, since, until, config))


def _document_from_json(path: Path) -> dict[str, Any]:
    try:
        raw = read_small_file(path, MAX_PROFILE_BYTES)
    except SmallFileError as exc:
        raise CompareInputError(f"{path}{exc}" + ("; not a profile" if exc.kind == TOO_LARGE
                                                  else "")) from None
    try:  # every number finite: an Infinity read as a figure would judge it
        document = loads_finite(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        if path.suffix == ".json" and raw.strip():
            raise CompareInputError(f"{path} is not JSON ({str(exc)[:120]}); pass a "
                                    "profile.json, a report --json document or an mlcostd "
                                    "store") from None
        # a .db that is no database, an empty file: the user did not mean JSON
        what = ("it is empty" if not raw.strip() else
                f"it does not begin as an SQLite database does, and it is not JSON either "
                f"({str(exc)[:80]})")
        raise CompareInputError(f"{path} is neither an mlcostd store nor a profile JSON: "
                                f"{what}; {EXPECTED}") from None
    if not (isinstance(document, dict) and isinstance(document.get("window"), dict)
            and isinstance(document.get("processes"), list)):
        raise CompareInputError(f"{path} is JSON but not a profile or report document (no "
                                "`window` and `processes`); pass what `mlcostd profile` or "
                                "`mlcostd report --json` wrote")
    return document


def load(spec: str, config: Config, now: float) -> tuple[str, dict[str, Any]]:
    """(label, report document) of one side: a profile, a JSON report, a store file or a
    range of the live store. CompareInputError / ValueError say what is wrong."""
    path = _on_disk(spec)
    if path is not None and path.is_dir():
        profile = path / "profile.json"
        if not profile.exists():
            raise CompareInputError(f"{path} is a folder without profile.json; pass the folder "
                                    "`mlcostd profile --out` wrote, or a file")
        return f"profile {spec}", _document_from_json(profile)
    if path is not None:
        if not path.is_file():
            raise CompareInputError(f"{path} is neither a regular file nor a folder")
        try:
            with path.open("rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as exc:
            raise CompareInputError(f"cannot read {path}: {exc.strerror}") from None
        if head == SQLITE_MAGIC:
            return f"store {spec}", _document_from_store(path, None, None, config)
        return f"profile {spec}", _document_from_json(path)
    try:
        since, until = parse_range(spec, now)
    except ValueError as exc:
        if _looks_like_a_path(spec):
            raise CompareInputError(f"{spec[:200]}: no such file or folder") from None
        raise CompareInputError(f"{spec[:120]!r} is not a file, a folder or a range: "
                                f"{exc}") from None
    db = Path(config_module.db_path(config))
    if not db.exists():
        raise CompareInputError(f"no database at {db} for the range {spec!r}; pass --db, or "
                                "compare files")
    return (f"{clock.local_time(since)} to {clock.local_time(until)}",
            _document_from_store(db, since, until, config))


# -- text ---------------------------------------------------------------------------------


def _side_lines(name: str, side: dict[str, Any]) -> list[str]:
    span = ""
    if isinstance(side.get("duration_s"), int | float):  # a profile: its run, as it says it
        span = f", {side['duration_s']:.0f} s"
    elif isinstance(side.get("since"), int | float) and isinstance(side.get("until"),
                                                                     int | float):
        span = f", {side['until'] - side['since']:.0f} s"
        first, last = side.get("recorded_from"), side.get("recorded_until")
        if isinstance(first, int | float) or isinstance(last, int | float):
            lo = first if isinstance(first, int | float) else side["since"]
            hi = last if isinstance(last, int | float) else side["until"]
            span += f", {clock.duration(max(hi - lo, 0))} of it recorded"
            if isinstance(last, int | float):  # a store that stopped inside the range
                span += f" (to {clock.local_time(last)}, when the recording stopped)"
    steps = f", {side['steps']} steps" if side.get("steps") else ""
    job = f", job {one_line(str(side['job']))}" if side.get("job") else ""
    hardware = analysis.hardware_text(side)
    hardware = f", {one_line(hardware)}" if hardware else ""
    out = _wrap(f"{name}: {one_line(str(side['label']))}{span}{steps}{job}{hardware}", "    ")
    for warning in side.get("warnings") or []:  # as `mlcostd profile` said them
        out += _wrap(f"  not representative: {one_line(warning['message'] or warning['code'])}",
                     "    ")
    return out


LABEL_MAX_CHARS = 79  # of a figure's label (one longer than its column can be: on its own line)
# The table's columns: the label's at least this wide, each figure's this wide where that fits.
LABEL_COLUMN = 20
FIGURE_COLUMN = 10
FIGURE_HEADERS = ("before", "after", "change", "noise")


def render_text(result: dict[str, Any]) -> str:
    """The comparison for a terminal: 80 columns, text from the inputs made safe."""
    out = ["mlcost compare", *_side_lines("A (before)", result["a"]),
           *_side_lines("B (after)", result["b"]), ""]
    out += _table(result["figures"])
    if any(fig.get("in_overall", True) is False for fig in result["figures"]):
        out += _wrap(analysis.NOT_COUNTED_NOTE, "  ")
    for why in sorted({str(f["why"]) for f in result["figures"] if f.get("noise_from") ==
                       analysis.ENERGY_NOISE and f.get("why")}):
        out += _wrap(f"  (energy: {why})", "    ")
    for why in sorted({str(f["why"]) for f in result["figures"]
                       if f.get("verdict") == analysis.INCONCLUSIVE and f.get("why")}):
        out += _wrap(f"  ({analysis.INCONCLUSIVE}: {why})", "    ")
    if result.get("price_note"):
        out += _wrap(f"  (price: {result['price_note']})", "    ")
    out += ["", "Recommendations"]
    changed = [r for r in result["recommendations"] if r["status"] != "same"]
    for rec in changed:
        money = []
        for key, name in (("savings_per_month_a", "before"), ("savings_per_month_b", "after")):
            if isinstance(rec.get(key), int | float):
                money.append(f"{name} ${rec[key]:,.0f}/month")
        out.append(f"  {rec['status']:<8} {one_line(rec['rule'])[:40]}"
                   + (f" ({', '.join(money)})" if money else ""))
    same = [r["rule"] for r in result["recommendations"] if r["status"] == "same"]
    if same:
        out.append(f"  same     {', '.join(one_line(r)[:40] for r in same)}")
    if not result["recommendations"]:
        out.append("  none on either side")
    out.append("")
    for said in result.get("notes") or []:  # what the sides are, before their verdict
        out += _wrap(f"Note: {said}", "    ")
    out += [*_wrap(f"Verdict: {result['verdict']} "
                       f"({analysis.verdict_counts(result['figures'])})", "    "), ""]
    out += _wrap(result["method"])
    return lines("\n".join(_fit(out)) + "\n")


def _table(figures: list[dict[str, Any]]) -> list[str]:
    """The figures' table, under WIDTH columns: the label's column as wide as its longest label
    ("host_preprocess share", 21, printed on a line of its own before), the figures' columns
    10 wide, narrowed a character at a time (the one with the most room first, none under its
    widest figure) where the label needs it; a label that does not fit even so goes on a line
    of its own, its figures under it (never cut)."""
    rows = []
    for fig in figures:
        unit = fig["unit"]
        noise = change_text(fig.get("noise"), unit, False)
        rows.append((one_line(fig["label"])[:LABEL_MAX_CHARS],
                     (figure_text(fig["a"], unit), figure_text(fig["b"], unit),
                      change_text(fig.get("change"), unit),
                      noise if noise == "-" else "±" + noise),
                     analysis.shown_verdict(fig)))
    verdict = max([len(v) for _, _, v in rows] + [len("verdict")])
    longest = max([len(label) for label, _, _ in rows] + [LABEL_COLUMN])
    figure_widths = [FIGURE_COLUMN] * len(FIGURE_HEADERS)

    def room(widths: list[int]) -> int:  # what is left for the label: its space and the
        return WIDTH - 1 - sum(w + 1 for w in widths) - 2 - verdict  # verdict's two

    least = [max([len(head)] + [len(cells[k]) for _, cells, _ in rows])
             for k, head in enumerate(FIGURE_HEADERS)]
    while longest > room(figure_widths):
        slack, k = max((w - n, k) for k, (w, n) in enumerate(zip(figure_widths, least,
                                                                 strict=True)))
        if slack <= 0:
            break
        figure_widths[k] -= 1
    width = max(LABEL_COLUMN, min(longest, room(figure_widths)))

    def line(label: str, cells: tuple[str, ...], said: str) -> str:
        shown = " ".join(f"{cell:>{w}}" for cell, w in zip(cells, figure_widths, strict=True))
        return f"{label:<{width}} {shown}  {said}".rstrip()

    out = [line("", FIGURE_HEADERS, "verdict")]
    for label, cells, said in rows:
        if len(label) > width:  # on a line of its own, never cut
            out.append(label)
            label = ""
        out.append(line(label, cells, said))
    return out


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH - 1, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=True)


def _fit(rows: list[str]) -> list[str]:
    return [row if len(row) < WIDTH else row[:WIDTH - 2] + "…" for row in rows]


# -- the command --------------------------------------------------------------------------


def run(args: argparse.Namespace, config: Config) -> int:
    now = clock.now()
    a, b = args.a, args.b
    if args.previous:
        return _run_previous(args, config)
    if args.baseline:
        if b is not None:
            print("mlcostd compare: with --baseline give at most one more input (B)",
                  file=sys.stderr)
            return 2
        try:
            since, until = parse_range(args.baseline, now)
        except ValueError as exc:
            print(f"mlcostd compare: --baseline {exc}", file=sys.stderr)
            return 2
        length = until - since
        if a is None and until >= now:  # B would be the same range: every verdict "same"
            print(f"mlcostd compare: --baseline {one_line(args.baseline)[:80]!r} ends now, as "
                  "does B by default (the last range of its length): the same range; give "
                  "one that ended before, e.g. --baseline 1d-ago/"
                  f"{config_module.format_duration(math.ceil(length))} (the same length a day "
                  "before), or B", file=sys.stderr)
            return 2
        a, b = args.baseline, a if a is not None else f"{math.ceil(length)}s"
    if a is None or b is None:
        print("mlcostd compare: give two inputs (A B), or --baseline RANGE; see "
              "`mlcostd compare --help`", file=sys.stderr)
        return 2
    same = same_range(a, b, now)
    if same is not None:
        print(f"mlcostd compare: A and B are the same range ({clock.local_time(same[0])} to "
              f"{clock.local_time(same[1])}): every figure would be 'within noise'; compare "
              f"it with one before it, e.g. `mlcostd compare "
              f"{config_module.format_duration(math.ceil(same[1] - same[0]))}-ago/"
              f"{config_module.format_duration(math.ceil(same[1] - same[0]))} "
              f"{one_line(b)[:40]}`", file=sys.stderr)
        return 2
    problem = range_problem(a, now) or range_problem(b, now)
    if problem is not None:  # neither a file nor a range: a usage error, as --baseline's is
        print(f"mlcostd compare: {one_line(problem)}", file=sys.stderr)
        return 2
    ranges = [spec for spec in (a, b) if _on_disk(spec) is None]
    if _refuse_clash(args, [a, b], Path(config_module.db_path(config)) if ranges else None):
        return 2
    try:
        label_a, doc_a = load(a, config, now)
        label_b, doc_b = load(b, config, now)
    except CompareInputError as exc:
        print(f"mlcostd compare: {one_line(str(exc))}", file=sys.stderr)
        return 1
    if _same_file(a, b):  # (after the load: a file that is no profile says so first)
        print(f"mlcostd compare: A and B are the same file ({one_line(a)[:120]}): every figure "
              "would be 'within noise'; compare it with another profile or snapshot, or with "
              "a time range of the store", file=sys.stderr)
        return 2
    return _show(args, [(label_a, doc_a, args.job, None), (label_b, doc_b, args.job, None)])


def _output_clash(html: str | None, inputs: list[str], store: Path | None) -> str | None:
    """Why --html may not be written where it names, when it is one of the inputs: a file
    compared, a file of a profile folder compared (or one `mlcostd profile` writes there), or
    the store a range or --previous reads (or SQLite's files beside it); None when it is
    none of them."""
    if not html:
        return None
    target = os.path.realpath(html)

    def same(path: Path) -> bool:
        if os.path.realpath(path) == target:
            return True
        try:  # a hard link, or another mount of the same file
            return os.path.samefile(path, html)
        except OSError:
            return False

    for spec in inputs:
        found = _on_disk(spec)
        if found is None:
            continue
        path = found
        if path.is_dir():  # its files (a page compare wrote there before aside), and the
            # names a profile writes there
            if os.path.dirname(target) == os.path.realpath(path) and (
                    os.path.basename(target) in PROFILE_FILES
                    or os.path.isfile(target) and not _compare_page(target)):
                return f"a file of the profile folder {spec}"
            held = [path / name for name in PROFILE_FILES]
            what = f"a file of the profile folder {spec}"
        elif path.exists():
            held = [path, *(Path(f"{path}{tail}") for tail in SQLITE_SIDECARS)]
            what = f"the input {spec}"
            if path.name in PROFILE_FILES:  # a profile's file: its folder's files are its too
                held += [path.parent / name for name in PROFILE_FILES]
                what = f"{what} or a file of its profile folder"
        else:
            continue
        if any(same(p) for p in held):
            return what
    if store is not None and any(same(Path(f"{store}{tail}"))
                                 for tail in ("", *SQLITE_SIDECARS)):
        return f"the store {store} the ranges are read from"
    return None


def _compare_page(path: str) -> bool:
    """Whether the file at `path` is a page `mlcostd compare --html` wrote (its title)."""
    from daemon.report_html.compare import TITLE

    try:
        with open(path, "rb") as f:
            return TITLE.encode() in f.read(4096)
    except OSError:
        return False


def _refuse_clash(args: argparse.Namespace, inputs: list[str], store: Path | None) -> bool:
    """Say so (and True) when --html would overwrite an input, or anything but a page (the
    rule of every HTML output: daemon.store.files.page_problem)."""
    from daemon.store.files import page_problem

    clash = _output_clash(args.html, inputs, store)
    if clash is None:
        problem = page_problem(args.html) if args.html else None
        if problem is not None:
            print(f"mlcostd compare: --html {one_line(problem)[:400]}", file=sys.stderr)
        return problem is not None
    print(f"mlcostd compare: --html {one_line(args.html)[:120]} is {one_line(clash)[:200]}: "
          "writing the page there would overwrite what is compared; name a file of its own, "
          "e.g. --html compare.html", file=sys.stderr)
    return True


def _same_file(a: str, b: str) -> bool:
    """Whether A and B name one existing file (a profile, a snapshot), by any two paths; a
    profile folder names its profile.json (`compare run/ run/`, `compare run/
    run/profile.json`)."""
    def named(spec: str) -> Path | None:
        path = _on_disk(spec)
        return path / "profile.json" if path is not None and path.is_dir() else path

    try:
        first, second = named(a), named(b)
        if first is None or second is None:
            return False
        return first.is_file() and second.is_file() and os.path.samefile(first, second)
    except OSError:
        return False


def _run_previous(args: argparse.Namespace, config: Config) -> int:
    if args.a is not None or args.baseline:
        print("mlcostd compare: --previous takes no A, B or --baseline", file=sys.stderr)
        return 2
    db = Path(config_module.db_path(config))
    if _refuse_clash(args, [], db):
        return 2
    try:
        if not db.exists():
            raise CompareInputError(f"no database at {db}; pass --db")
        try:
            job, command, (a0, a1), (b0, b1) = analysis.previous_runs(db, args.previous)
        except analysis.NoPreviousRun as exc:
            raise CompareInputError(str(exc)) from None
        sides = [(f"previous run, {clock.local_time(a0)} to {clock.local_time(a1)}",
                  _document_from_store(db, a0, a1, config), job, command),
                 (f"latest run, {clock.local_time(b0)} to {clock.local_time(b1)}",
                  _document_from_store(db, b0, b1, config), job, command)]
    except CompareInputError as exc:
        print(f"mlcostd compare: {one_line(str(exc))}", file=sys.stderr)
        return 1
    return _show(args, sides)


def _show(args: argparse.Namespace,
          inputs: list[tuple[str, dict[str, Any], str | None, str | None]]) -> int:
    """Print (and write) the comparison of two sides (label, document, job, command)."""
    page = None
    try:
        sides = [analysis.Side(*side) for side in inputs]
        result = analysis.compare(sides[0], sides[1], seed=args.seed)
        text = None if args.json else render_text(result)
        if args.html:  # in memory first: a page that fails half-way must not empty the file
            from daemon.report_html.compare import render as render_html

            page = render_html(result)
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        # a document someone edited or wrote by hand: say so, never a traceback
        print(f"mlcostd compare: cannot compare {one_line(inputs[0][0])} with "
              f"{one_line(inputs[1][0])}: a field has the wrong type or value "
              f"({type(exc).__name__}: {one_line(str(exc))[:160]})", file=sys.stderr)
        return 1
    if args.job is not None:
        for side in sides:
            if not side.processes:
                print(f"mlcostd compare: no process of job {one_line(args.job)!r} in "
                      f"{one_line(side.label)}", file=sys.stderr)
                return 1
    if args.html and page is not None:
        from daemon.store.files import write_page

        try:
            write_page(Path(args.html), page)
        except OSError as exc:
            print(f"mlcostd compare: cannot write {args.html}: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        sys.stdout.write(text or "")
        if args.html:
            print(f"html: {args.html}")
    return 0
