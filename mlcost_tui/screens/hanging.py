"""Text whose wrapped lines keep their item's indent: a details screen's body is one text of
indented items ("  steady GPU use of its own …"), and a wrapped item's continuation started at
column 1, where it read as a new item (probe148 L2). Here each continuation line starts two
columns right of its own line's indent (a hanging indent).

The wrapping is done once per width (a screen is resized rarely) and only on the screens
that show it; nothing of it runs on the main screen."""

from __future__ import annotations

from typing import NamedTuple

from rich.text import Text
from textual.content import Content
from textual.css.styles import RulesMap
from textual.geometry import Offset
from textual.selection import Selection
from textual.strip import Strip
from textual.style import Style
from textual.visual import RenderOptions, Visual
from textual.widgets import Static

HANG = 2  # continuation lines: this many columns right of their line's indent
MIN_ROOM = 20  # narrower than this right of the indent: wrapped as is, at column 1


def indent_of(plain: str) -> int:
    return len(plain) - len(plain.lstrip(" "))


class Shown(NamedTuple):
    """A line as shown: its text, and where it comes from (the line and character it starts
    at in the text, and the spaces put before it), so a selection copies the text itself."""

    content: Content
    y: int
    x: int
    pad: int


def pieces(line: Content, start: int, width: int) -> list[tuple[int, Content]]:
    """`line[start:]` wrapped to `width`: each piece with where it starts in `line`."""
    plain, found = line.plain, []
    at = start
    for piece in line[start:].wrap(width):
        where = plain.find(piece.plain, at)
        at = where if where >= 0 else at  # (a tab, expanded by the wrap: where it was)
        found.append((at, piece))
        at += len(piece.plain)
    return found


def shown_lines(content: Content, width: int) -> list[Shown]:
    """`content` wrapped to `width`, each continuation line indented by its line's indent
    plus HANG (a first line keeps its own width)."""
    lines: list[Shown] = []
    for y, line in enumerate(content.split(allow_blank=True)):
        if line.cell_length <= width:
            lines.append(Shown(line, y, 0, 0))
            continue
        indent = indent_of(line.plain)
        hang = indent + HANG
        if width - hang < MIN_ROOM:
            lines.extend(Shown(piece, y, x, 0) for x, piece in pieces(line, 0, width))
            continue
        (x, first), = pieces(line, indent, width - indent)[:1]
        lines.append(Shown(first.pad_left(indent), y, x - indent, 0))  # its own indent
        rest = x + len(first.plain)
        rest += indent_of(line.plain[rest:])  # the spaces the break fell on
        lines.extend(Shown(piece.pad_left(hang), y, x, hang)
                     for x, piece in pieces(line, rest, width - hang))
    return lines


def hang_lines(content: Content, width: int) -> list[Content]:
    return [shown.content for shown in shown_lines(content, width)]


class HangingText(Visual):
    """A Visual of text (from a Rich Text) wrapped with hanging indents; str() is the text
    itself, unwrapped, as a Static's Text gives it."""

    def __init__(self, text: Text | Content) -> None:
        self.content = text if isinstance(text, Content) else Content.from_rich_text(text)
        self._wrapped: tuple[int, Content, list[Shown]] | None = None

    def __str__(self) -> str:
        return self.content.plain

    @property
    def plain(self) -> str:
        return self.content.plain

    def _shown(self, width: int) -> tuple[Content, list[Shown]]:
        if self._wrapped is None or self._wrapped[0] != width:
            lines = shown_lines(self.content, max(width, 1))
            self._wrapped = (width, Content("\n").join(line.content for line in lines), lines)
        return self._wrapped[1], self._wrapped[2]

    def wrapped(self, width: int) -> Content:
        """The text as shown at `width`."""
        return self._shown(width)[0]

    def selected(self, selection: Selection, width: int) -> str:
        """The text under a selection made on the lines as shown at `width`: the text itself,
        a wrapped line whole, without the indents put before its pieces (a command copied by
        hand must not break in two)."""
        lines = self._shown(width)[1]

        def source(offset: Offset | None) -> Offset | None:
            if offset is None or not lines:
                return None
            shown = lines[min(max(offset.y, 0), len(lines) - 1)]
            x = min(max(offset.x - shown.pad, 0), len(shown.content.plain) - shown.pad)
            return Offset(shown.x + x, shown.y)

        return Selection(source(selection.start), source(selection.end)).extract(
            self.content.plain)

    def render_strips(self, width: int, height: int | None, style: Style,
                      options: RenderOptions) -> list[Strip]:
        return self.wrapped(width).render_strips(width, height, style, options)

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return self.content.get_optimal_width(rules, container_width)

    def get_minimal_width(self, rules: RulesMap) -> int:
        return self.content.get_minimal_width(rules)

    def get_height(self, rules: RulesMap, width: int) -> int:
        return self.wrapped(width).get_height(rules, width)


class HangingStatic(Static):
    """A Static given a HangingText (at its start and on each update), whose text can still
    be selected with the mouse and copied: Textual's Static copies only a Text or Content."""

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        visual = self.visual
        if isinstance(visual, HangingText):
            return visual.selected(selection, self.content_region.width), "\n"
        return super().get_selection(selection)
