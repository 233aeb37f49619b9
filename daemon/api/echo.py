"""A request's value as an API error message quotes it: named, and short whatever was sent.

Errors name the bad value (STYLE.md), and the value is the client's: a query parameter of
7,000 characters, a pid of 4,000 digits or a 60 KiB JSON string came back whole in the error
(probe 83). Every handler in daemon/api quotes a request's value through `shown`.
"""

from __future__ import annotations

from typing import Any

from daemon.wire import crop

ECHO_CHARS = 60  # of a value's repr, in an error message


def shown(value: Any, quoted: bool = True) -> str:
    """`value` as an error message quotes it: its repr, at most ECHO_CHARS characters (a
    longer one cut with an ellipsis, its length said after it); an integer of more digits
    than that, by its number of digits. Control bytes come out escaped (it is a repr).
    `quoted=False`: a string already checked to be plain (a process key's digits) as it is,
    cut the same way."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) < 10 ** ECHO_CHARS:
            return repr(value)
        try:
            return f"an integer of {len(str(abs(value)))} digits"
        except ValueError:  # past Python's int-to-text limit (4300 digits)
            return "an integer of thousands of digits"
    text = repr if quoted else str
    if isinstance(value, str) and len(value) > ECHO_CHARS:
        return f"{crop(text(value[:ECHO_CHARS]), ECHO_CHARS)} ({len(value)} characters)"
    return crop(text(value), ECHO_CHARS)
