"""The log pane: Textual's `Log` (fast batched writes) with a colour per rank and errors marked.

`Log` takes plain strings, which is what makes it fast (~170k lines/s with `write_lines`).
Colour is added only where a line is drawn, and only the visible rows are drawn, so it costs
nothing per line written: each line carries its rank and kind beside the text.
"""

from __future__ import annotations

from heapq import nlargest
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import Reactive
from textual.strip import Strip
from textual.widgets import Log

from .colours import rank_colour, theme_colour
from .logbuffer import HOST, KIND, RANK, SHOWN, TEXT, Kind, Line, clean, tag

if TYPE_CHECKING:
    from typing_extensions import Self

GUTTER = {"out": "│", "err": "┃", "tb": "┃"}  # stderr and tracebacks get a heavy bar


def _texts(lines: list[Line], widths: tuple[int, int] | None) -> list[str]:
    """What the log shows of each line: `r3 node1 │ text`, or `│ text` in a rank's view.

    Runs for every line drawn (tens of thousands a second in a flood): tags are made once per
    rank, and only a line with a control character goes through `clean`.
    """
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


def _widest(texts: list[str]) -> int:
    """Cells of the widest line, judged by its longest few (Log measures every line in a
    thread on every write; this is much cheaper)."""
    if not texts:
        return 0
    return max(cell_len(Log._process_line(t)) for t in nlargest(8, texts, key=len))


class RankLog(Log):
    """Lines of one view: `r3 node1 │ text` in the all-ranks view, `│ text` in a rank's."""

    # A change of the scrollable size lays out the whole screen again by default: the most
    # expensive thing the app did under a flood (every redraw, every growing write). Both
    # scrollbars are always shown (app.tcss), so a new size only needs them updated.
    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    def watch_virtual_size(self, size: Size) -> None:
        self._scroll_update(size)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(max_lines=SHOWN, auto_scroll=True, id=id)
        self._meta: list[tuple[int | None, Kind]] = []  # beside Log._lines, one per line
        self._widths: tuple[int, int] | None = None  # tag widths; None: no tag (one rank)
        self._styles: dict[object, Style] = {}
        self._base_style: Style | None = None
        self._pinned_y = 0.0  # where following last left the view: above it, the user scrolled

    def show(
        self, lines: list[Line], *, widths: tuple[int, int] | None, scroll: bool = True
    ) -> None:
        """Append lines (of the view currently shown)."""
        if not lines:
            return
        self._widths = widths
        texts = _texts(lines, widths)
        self._meta.extend((ln[RANK], ln[KIND]) for ln in lines)
        self._width = max(self._width, _widest(texts))
        # Log scrolls only if it was at the end; after a resize it may not be: pin it here.
        self.write_lines(texts, scroll_end=False)
        if scroll:
            self.pin_to_end()

    def replace(self, lines: list[Line], *, widths: tuple[int, int] | None) -> None:
        """Draw a view from scratch (another view, filter, or back to following).

        The lines are swapped in place rather than `clear()` then written: each change of the
        virtual size lays out the whole screen again (the costliest thing the app does under a
        flood), and a full view keeps the same size. For the same reason the width only grows.
        """
        lines = lines[-SHOWN:]
        self._widths = widths
        self._lines = _texts(lines, widths)
        self._meta = [(ln[RANK], ln[KIND]) for ln in lines]
        self._width = max(self._width, _widest(self._lines))
        self._render_line_cache.clear()
        self._updates += 1
        self.virtual_size = Size(self._width, len(self._lines))
        self.refresh()
        self.pin_to_end()

    def pin_to_end(self) -> None:
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self._pinned_y = self.scroll_y

    @property
    def scrolled_up(self) -> bool:
        """Did the user scroll up since the view was last pinned to its end?"""
        return self.scroll_y < self._pinned_y - 0.5

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]
        """Measured in `show` already (Log starts a thread for this on every write)."""

    def clear(self) -> Self:
        self._meta.clear()
        self._pinned_y = 0.0
        return super().clear()

    def _prune_max_lines(self) -> None:
        if self.max_lines is not None and (extra := len(self._lines) - self.max_lines) > 0:
            del self._meta[:extra]
        super()._prune_max_lines()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()  # the theme may have changed
        self._base_style = None

    def _render_line(self, y: int, scroll_x: int, width: int) -> Strip:
        # As Log's, but the widget's style is worked out once, not once per line drawn: it
        # walks every ancestor's styles (~0.5 ms a line here, most of the drawing's cost).
        if self._base_style is None:
            self._base_style = self.rich_style
        style = self._base_style
        if y >= len(self._lines):
            return Strip.blank(width, style)
        strip = self._render_line_strip(y, style)
        return strip.crop_extend(scroll_x, scroll_x + width, style).apply_offsets(scroll_x, y)

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

    def _render_line_strip(self, y: int, rich_style: Style) -> Strip:
        raw = self._process_line(self._lines[y])
        text = Text(raw, no_wrap=True)
        text.stylize(rich_style)
        rank, kind = self._meta[y] if y < len(self._meta) else (None, "out")
        gutter = 0
        if self._widths is not None:
            rank_w, host_w = self._widths
            gutter = rank_w + host_w + 2
            text.stylize(self._style("node" if rank is None else rank), 0, gutter - 1)
        text.stylize(self._style(kind), gutter, gutter + 1)
        if kind == "tb":
            text.stylize(self._style("tb"), gutter + 2)
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(y - self._clear_y)):
            start, end = span
            style = self.screen.get_component_rich_style("screen--selection")
            text.stylize(style, start, len(text) if end == -1 else end)
        return Strip(text.render(self.app.console), cell_len(raw))
