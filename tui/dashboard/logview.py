"""The log pane's lines: a colour per rank, errors marked, drawn only where they are on screen.

It keeps the view's last SHOWN lines as the buffer's own tuples and makes a line's text only
when that line is drawn (Textual's Line API), so a new view, a filter or a flood costs a list
operation, not a string per line: Textual's `Log` formats and stores a string for each line
written, which made a key that redraws the view (`]`, `e`, `f`) wait for 5,000 of them.
"""

from __future__ import annotations

from heapq import nlargest
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import Reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .colours import rank_colour, theme_colour
from .logbuffer import HOST, KIND, RANK, SHOWN, TEXT, Line, clean, tag

if TYPE_CHECKING:
    from textual.selection import Selection

GUTTER = {"out": "│", "err": "┃", "tb": "┃"}  # stderr and tracebacks get a heavy bar


def _texts(lines: list[Line], widths: tuple[int, int] | None) -> list[str]:
    """What the log shows of each line: `r3 node1 │ text`, or `│ text` in a rank's view.
    Tags are made once per rank; only a line with a control character goes through `clean`."""
    out: list[str] = []
    add = out.append
    tags: dict[object, str] = {}
    for line in lines:
        rank, text = line[RANK], line[TEXT]
        if not text.isprintable():  # \x1b, \r, \t, ...: rare, and slower to handle
            text = clean(text)
        if widths is None:
            add(f"{GUTTER[line[KIND]]} {text}")
            continue
        key = line[HOST] if rank is None else rank
        prefix = tags.get(key)
        if prefix is None:
            prefix = tags[key] = tag(line, widths) + " "
        add(f"{prefix}{GUTTER[line[KIND]]} {text}")
    return out


def _widest(lines: list[Line], widths: tuple[int, int] | None) -> int:
    """Cells of the widest line, judged by its longest few texts."""
    if not lines:
        return 0
    longest = nlargest(8, lines, key=lambda line: len(line[TEXT]))
    gutter = 2 + (sum(widths) + 2 if widths is not None else 0)
    return gutter + max(cell_len(clean(line[TEXT])) for line in longest)


class RankLog(ScrollView, can_focus=True):
    """Lines of one view: `r3 node1 │ text` in the all-ranks view, `│ text` in a rank's."""

    DEFAULT_CSS = """
    RankLog {
        background: $surface;
        color: $text;
        overflow: scroll;
        &:focus {
            background-tint: $foreground 5%;
        }
    }
    """
    # A change of the scrollable size lays out the whole screen again by default: the most
    # expensive thing the app did under a flood (every redraw, every growing write). Both
    # scrollbars are always shown (app.tcss), so a new size only needs them updated.
    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    def watch_virtual_size(self, size: Size) -> None:
        self._scroll_update(size)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: list[Line] = []  # the buffer's own tuples: no text made until drawn
        self._widths: tuple[int, int] | None = None  # tag widths; None: no tag (one rank)
        self._width = 0  # cells of the widest line so far: the width only grows
        self._styles: dict[object, Style] = {}
        self._base_style: Style | None = None
        self._pinned_y = 0.0  # where following last left the view: above it, the user scrolled

    @property
    def lines(self) -> list[str]:
        """The lines as shown (tests, selection)."""
        return _texts(self._lines, self._widths)

    def show(
        self, lines: list[Line], *, widths: tuple[int, int] | None, scroll: bool = True
    ) -> None:
        """Append lines (of the view currently shown)."""
        if not lines:
            return
        self._widths = widths
        self._lines.extend(lines)
        if len(self._lines) > SHOWN:
            del self._lines[: len(self._lines) - SHOWN]
        self._resize(lines)
        if scroll:
            self.pin_to_end()

    def replace(self, lines: list[Line], *, widths: tuple[int, int] | None) -> None:
        """Draw a view from scratch (another view, filter, or back to following)."""
        self._lines = lines[-SHOWN:]
        self._widths = widths
        self._resize(self._lines)
        self.pin_to_end()

    def clear(self) -> None:
        self._lines = []
        self._pinned_y = 0.0
        self._resize([])
        self.scroll_to(0, 0, animate=False, immediate=True)

    def _resize(self, new: list[Line]) -> None:
        self._width = max(self._width, _widest(new, self._widths))
        self.virtual_size = Size(self._width, len(self._lines))
        self.refresh()

    def pin_to_end(self) -> None:
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self._pinned_y = self.scroll_y

    @property
    def scrolled_up(self) -> bool:
        """Did the user scroll up since the view was last pinned to its end?"""
        return self.scroll_y < self._pinned_y - 0.5

    # -- drawing ----------------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()  # the theme may have changed
        self._base_style = None

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        # The widget's style is worked out once, not once per line drawn: it walks every
        # ancestor's styles.
        if self._base_style is None:
            self._base_style = self.rich_style
        style = self._base_style
        index = scroll_y + y
        if index >= len(self._lines):
            return Strip.blank(width, style)
        strip = self._strip(index, style)
        return strip.crop_extend(scroll_x, scroll_x + width, style).apply_offsets(scroll_x, index)

    def _style(self, key: object) -> Style:
        style = self._styles.get(key)
        if style is None:
            if isinstance(key, int):
                style = Style(color=rank_colour(key, self.app.current_theme.dark), bold=True)
            elif key in ("node", "out"):
                style = Style(dim=True, italic=key == "node")
            elif key == "err":
                style = Style(color=theme_colour(self, "text-warning") or None, bold=True)
            else:  # a traceback line
                style = Style(color=theme_colour(self, "text-error") or None)
            self._styles[key] = style
        return style

    def _strip(self, index: int, base: Style) -> Strip:
        line = self._lines[index]
        raw = _texts([line], self._widths)[0]
        text = Text(raw, no_wrap=True)
        text.stylize(base)
        rank, kind = line[RANK], line[KIND]
        gutter = 0
        if self._widths is not None:
            rank_w, host_w = self._widths
            gutter = rank_w + host_w + 2
            text.stylize(self._style("node" if rank is None else rank), 0, gutter - 1)
        text.stylize(self._style(kind), gutter, gutter + 1)
        if kind == "tb":
            text.stylize(self._style("tb"), gutter + 2)
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(index)):
            start, end = span
            style = self.screen.get_component_rich_style("screen--selection")
            text.stylize(style, start, len(text) if end == -1 else end)
        return Strip(text.render(self.app.console), cell_len(raw))

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        return selection.extract("\n".join(self.lines)), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()
