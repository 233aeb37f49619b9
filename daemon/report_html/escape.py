"""Text from a store or a document, as the pages show it: HTML-escaped, and every control byte
and bidirectional override written out (`\\x1b`, `\\u202e`), never passed on. A store from
elsewhere, or edited, is not cleaned on its way in as a live process's text is: raw escape
bytes in a page's title acted on a terminal that `cat`s the file, and U+202E reordered text
in a browser."""

from __future__ import annotations

import html
from typing import Any

from daemon.sources.safe_text import lines


def escaped(value: Any) -> str:
    """`value` as text safe in HTML (attributes too) and on a terminal; '' for None."""
    return html.escape(lines("" if value is None else str(value)), quote=True)


# (a name in words joined by `_`, `.`, `/` or `:` may break after them, and only there)
_BREAK_AFTER = str.maketrans({c: c + "<wbr>" for c in "_./:"})


def breakable(value: Any) -> str:
    """`value` escaped as `escaped` does, a long name (a job, a module, a path) free to wrap
    after its `_`, `.`, `/` and `:` rather than widen its column past a narrow screen."""
    return escaped(value).translate(_BREAK_AFTER)


# A table of the class `stack` at a phone's width (shared by the pages' CSS): each row a block,
# each cell a line that its column's name heads (data-label), so no column is off the screen
# or behind a sideways scrollbar (probe 157 M3, L1).
STACK_CSS = """@media (max-width:640px){table.stack,table.stack tbody,table.stack tr,
table.stack td{display:block;width:auto;max-width:100%}table.stack thead,
table.stack tr.head{display:none}table.stack tr{border-bottom:1px solid #ddd;padding:4px 0}
table.stack td{border:0;padding:1px 6px;text-align:left;white-space:normal}
table.stack td:empty{display:none}table.stack td>code{min-width:0}
table.stack td[data-label]::before{content:attr(data-label) ": ";color:#6b7280}}"""


def labelled(cell: str, label: str) -> str:
    """A table cell (`<td ...>...</td>`) with its column's name as data-label (STACK_CSS)."""
    end = cell.index(">")
    return f'{cell[:end]} data-label="{escaped(label)}"{cell[end:]}'
