"""Regular expressions a person configured ([cost].jobs), run on text any user controls (the
command lines of their processes), in the root daemon's tick and in every tool that reads a
store the patterns were recorded in.

Python's `re` backtracks, and has no time limit: a pattern with a repeat inside a repeat, or
alternatives under a repeat (`(a+)+$`, `(\\w+\\s?)*$`, `(a|aa)+$`), takes time exponential in
the text on a line that almost matches; a hostile command line then hangs the daemon. Such a
pattern is refused (`job_pattern`) where the config is read, and skipped where a store recorded
it. What is left (`.*a.*b$`, polynomial) runs on the first MATCHED_CHARS characters of a
command line only: ~0.2 s at worst, once per distinct command line (the labels are cached).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

MATCHED_CHARS = 1024  # of a command line, what a job pattern is run on

_sre: Any
_sre_parse: Any
try:  # CPython's own parser of patterns (re._parser since 3.11, sre_parse before; private)
    _sre = importlib.import_module("re._constants")
    _sre_parse = importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - another Python: the shape is not checked
    _sre = _sre_parse = None


def job_pattern(pattern: str) -> re.Pattern[str]:
    """`pattern` compiled; ValueError (saying why) where it is no regular expression, or has
    a shape that can take exponential time."""
    try:
        compiled = re.compile(pattern)
    except (re.error, TypeError) as exc:
        raise ValueError(f"not a regular expression ({exc})") from None
    risk = _exponential(pattern)
    if risk is not None:
        raise ValueError(f"{risk}: on a command line that almost matches it takes time "
                         "exponential in the line's length, and any user's process can hang "
                         "mlcostd that way; write it without (e.g. `train_llm` rather than "
                         "`(train_\\w+)+`, `[a-z]+` rather than `(a|b|c)+`)")
    return compiled


def safe_job_patterns(jobs: dict[str, str]) -> dict[str, str]:
    """The patterns of `jobs` that `job_pattern` accepts (a store's recorded ones: its
    file may come from anyone)."""
    kept = {}
    for name, pattern in jobs.items():
        try:
            job_pattern(pattern)
        except ValueError:
            continue
        kept[name] = pattern
    return kept


def _exponential(pattern: str) -> str | None:
    """Why `pattern`'s shape can take exponential time, else None."""
    if _sre_parse is None:
        return None
    try:
        parsed = _sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - re.compile accepted it; its shape is not told
        return None
    return _walk(list(parsed), in_repeat=False)


_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def _walk(items: list[tuple[Any, Any]], in_repeat: bool) -> str | None:
    for op, value in items:
        name = str(op)
        if name in _REPEATS:
            least, most, body = value
            unbounded = most == _sre.MAXREPEAT or most > 64
            if in_repeat and least != most:  # (a{1,3})+ splits a run of a's many ways too
                return "a repeat inside a repeat"
            if unbounded and _has_branch(list(body)):
                return "alternatives under a repeat"
            found = _walk(list(body), in_repeat or unbounded)
        elif name in ("SUBPATTERN", "ASSERT", "ASSERT_NOT"):
            found = _walk(list(value[-1]), in_repeat)
        elif name == "ATOMIC_GROUP":
            found = _walk(list(value), in_repeat)
        elif name == "BRANCH":
            found = next((why for branch in value[1]
                          if (why := _walk(list(branch), in_repeat)) is not None), None)
        else:
            found = None
        if found is not None:
            return found
    return None


def _has_branch(items: list[tuple[Any, Any]]) -> bool:
    for op, value in items:
        name = str(op)
        if name == "BRANCH":
            return True
        if name == "SUBPATTERN" and _has_branch(list(value[-1])):
            return True
        if name == "ATOMIC_GROUP" and _has_branch(list(value)):
            return True
    return False
