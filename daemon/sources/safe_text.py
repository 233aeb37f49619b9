"""Text from processes made safe to print: every control character shown as an escape, visibly.

A command line, a user or job name, a host name, a path or a Python frame is written by whoever
started the process, and mlcostd runs as root on hosts shared by many users. Printed raw, an
`ESC ]0;` sets the operator's terminal title, `ESC [2J` clears the screen, `ESC ]52;c;` writes
the clipboard, and a carriage return or a newline forges a log line. So such text is data: each
control character is shown as the escape Python would write for it, never interpreted:

- C0 controls and DEL (`\\x00`-`\\x1f`, `\\x7f`): ESC is the four characters `\\x1b`, a
  newline `\\n`, a tab `\\t`, a carriage return `\\r`;
- C1 controls (`\\x80`-`\\x9f`; `\\x9b` is a one-byte CSI on some terminals): `\\x9b`;
- bidirectional overrides and isolates (`\\u202e`...), which reorder what a reader sees, and
  the invisible format characters (`\\u200b`, a soft hyphen `\\xad`, a tag `\\U000e0041`; all
  of Unicode's category Cf but the zero-width joiner and non-joiner), the Hangul fillers and the
  variation selectors, which hide or forge spacing;
- the Unicode line and paragraph separators (`\\u2028`, `\\u2029`): `str.splitlines()`, a
  log viewer and a JSON-lines reader may break a line there (probe 110);
- lone surrogates: a byte that was not UTF-8 in /proc (psutil decodes with surrogateescape) is
  shown as that byte, `\\xff`; it could not even be written to a UTF-8 terminal or to SQLite.

`one_line` shows newline and tab too: a command line, a name or a path is one line in a table
and in the log, and a newline inside one is the forging trick. `lines` keeps newline and tab:
for text of several lines that mlcostd wrote itself around such values (a report, a traceback
in the log). A backslash is left as it is (Windows paths, regular expressions in arguments), so
a real ESC and the four typed characters `\\x1b` look alike: both are harmless.

Both functions are idempotent (what they return has no control character left) and linear in
the length of the text. The process source applies `one_line` where text enters; the printers
(TUI, report, check, --watch, the log) apply them again where text leaves for a terminal, so a
store written by an older mlcostd or edited by hand is shown safely too.

`without_url_credentials` hides a URL's user and password (`http://user:pw@host`) wherever
text holding one is shown: a URL the user gave (mlcost-top's --prometheus title and errors) as
well as a command line (daemon.sources.redact).
"""

from __future__ import annotations

import re
import shlex

# Bidi embeddings, overrides and isolates, plus the invisible marks: "Trojan Source" reordering.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Invisible: every format character (Unicode category Cf: zero-width space, word joiner,
# byte-order mark, soft hyphen, invisible operators, tags ...) but the zero-width non-joiner
# and joiner that some scripts and emoji need; and the invisible letters and selectors that are
# not Cf: the Hangul fillers, the Mongolian vowel separator, the variation selectors (probe 139
# F2: a frame named with a soft hyphen and a tag character reached the screen as written). The
# Cf ranges as of Unicode 15 (the bidi ones are in _BIDI).
_HIDDEN = ("\u00ad\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u2060-\u2064"
           "\u206a-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
           "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
           "\u115f\u1160\u3164\uffa0\ufe00-\ufe0f\U000e0100-\U000e01ef")
_LINE_BREAKS = "\u2028\u2029"  # where str.splitlines() and other readers break a line
_UNSAFE = re.compile(
    f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}{_HIDDEN}{_LINE_BREAKS}\\ud800-\\udfff]")
_UNSAFE_KEEPING_LINES = re.compile(
    f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}{_HIDDEN}{_LINE_BREAKS}\\ud800-\\udfff]")
# The same for text that is all ASCII (str.isascii() reads a flag: most command lines, names
# and paths), where only C0 controls and DEL can be: the whole class costs ~3.7x on them.
_UNSAFE_ASCII = re.compile("[\\x00-\\x1f\\x7f]")
_UNSAFE_ASCII_KEEPING_LINES = re.compile("[\\x00-\\x08\\x0b-\\x1f\\x7f]")


# The three a reader knows by their Python names.
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the original byte
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def one_line(text: str) -> str:
    """`text` with every control character (newline and tab included), bidi control and lone
    surrogate replaced by its visible escape: `\\x1b`, `\\n`, `\\t`, `\\r`, `\\u202e`."""
    return (_UNSAFE_ASCII if text.isascii() else _UNSAFE).sub(_shown, text)


def is_safe(text: str) -> bool:
    """Whether `text` has nothing `one_line` would change (one C-level scan)."""
    return (_UNSAFE_ASCII if text.isascii() else _UNSAFE).search(text) is None


def lines(text: str) -> str:
    """Like `one_line`, but newlines and tabs are kept: for text of several lines."""
    return (_UNSAFE_ASCII_KEEPING_LINES if text.isascii() else _UNSAFE_KEEPING_LINES).sub(
        _shown, text)


# Marks what was hidden (daemon.sources.redact hides secrets of command lines with it too).
REDACTED = "<redacted>"
# The scheme starts a word and is at most 32 characters (RFC 3986 schemes are short): unanchored
# and unbounded, it was tried from every letter of a long word to its end.
_URL_CREDENTIALS = re.compile(
    r"(?<![a-z0-9+.-])(?P<scheme>[a-z][a-z0-9+.-]{0,31}://)(?P<userinfo>[^/\s@]+)@", re.I)


def without_url_credentials(text: str) -> str:
    """`text` with the user and password of each URL in it (`scheme://USERINFO@`) replaced by
    REDACTED: the host and path stay, to say where."""
    return _URL_CREDENTIALS.sub(lambda m: m.group("scheme") + REDACTED + "@", text)


def _ansi_c(match: re.Match[str]) -> str:
    char = match.group()
    if char in "\\'":
        return "\\" + char
    code = ord(char)
    if 0x80 <= code <= 0xFF:  # a character (U+0080-U+00FF), not the byte `\\xHH` would be
        return f"\\u{code:04x}"
    return _shown(match)


_UNSAFE_OR_QUOTING = re.compile(f"{_UNSAFE.pattern[:-1]}\\\\']")


def shell_quoted(word: str) -> str:
    """`word` quoted so that a POSIX shell takes it back as it is (shlex.quote), and, when it
    holds what `one_line` escapes (a tab, a newline, ESC, a bidi override, a byte that was not
    UTF-8), as bash's, zsh's and ksh's `$'...'` with those escapes (`$'tab\\there'`), so the
    result is one line with no control character in it that a shell still takes back
    whole (in a UTF-8 locale): `'tab\\there'` would be read back as a backslash and a t."""
    if is_safe(word):
        return shlex.quote(word)
    return "$'" + _UNSAFE_OR_QUOTING.sub(_ansi_c, word) + "'"
