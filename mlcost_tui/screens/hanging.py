"""Text whose wrapped lines keep their item's indent: a details screen's body is one text of
indented items ("  steady GPU use of its own …"), and a wrapped item's continuation started at
column 1, where it read as a new item (probe148 L2). Here each continuation line starts two
columns right of its own line's indent (a hanging indent).

The wrapping is done once per width (a screen is resized rarely) and only on the screens
that show it; nothing of it runs on the main screen."""

from __future__ import annotations

from rich.text import Text
from textual.content import Content
from textual.css.styles import RulesMap
from textual.selection import Selection
from textual.strip import Strip
from textual.style import Style
from textual.visual import RenderOptions, Visual
from textual.widgets import Static

HANG = 2  # continuation lines: this many columns right of their line's indent
MIN_ROOM = 20  # narrower than this right of the indent: wrapped as is, at column 1


def indent_of(plain: str) -> int:
    return len(plain) - len(plain.lstrip(" "))


def hang_lines(content: Content, width: int) -> list[Content]:
    """`content` wrapped to `width`, each continuation line indented by its line's indent
    plus HANG (a first line keeps its own width)."""
    lines: list[Content] = []
    for line in content.split(allow_blank=True):
        if line.cell_length <= width:
            lines.append(line)
            continue
        indent = indent_of(line.plain)
        hang = indent + HANG
        if width - hang < MIN_ROOM:
            lines.extend(line.wrap(width))
            continue
        first = line[indent:].wrap(width - indent)[0]
        lines.append(first.pad_left(indent))
        rest = line[indent + len(first.plain):]
        rest = rest[indent_of(rest.plain):]  # the spaces the break fell on
        lines.extend(piece.pad_left(hang) for piece in rest.wrap(width - hang))
    return lines


class HangingText(Visual):
    """A Visual of text (from a Rich Text) wrapped with hanging indents; str() is the text
    itself, unwrapped, as a Static's Text gives it."""

    def __init__(self, text: Text | Content) -> None:
        self.content = text if isinstance(text, Content) else Content.from_rich_text(text)
        self._wrapped: tuple[int, Content] | None = None

    def __str__(self) -> str:
        return self.content.plain

    @property
    def plain(self) -> str:
        return self.content.plain

    def wrapped(self, width: int) -> Content:
        """The text as shown at `width` (what a selection on the screen picks from)."""
        if self._wrapped is None or self._wrapped[0] != width:
            self._wrapped = (width, Content("\n").join(hang_lines(self.content, max(width, 1))))
        return self._wrapped[1]

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
            return selection.extract(visual.wrapped(self.content_region.width).plain), "\n"
        return super().get_selection(selection)
