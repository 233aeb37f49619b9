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
