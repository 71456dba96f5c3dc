"""A small braille line plot with an optional horizontal target line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import groupby

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row][col] bits of a braille cell
_DOTS_BY_X = tuple(tuple(row[col] for row in _DOTS) for col in (0, 1))  # [col][row]


def raster(
    points: Sequence[tuple[float, float]], width: int, height: int, lo: float, hi: float
) -> list[list[int]]:
    """Braille bit masks, `height` rows × `width` cells, points joined column to column."""
    grid = [[0] * width for _ in range(height)]
    if not points or width < 1 or height < 1:
        return grid
    px_w, px_h = width * 2, height * 4
    x0, x1 = points[0][0], points[-1][0]
    sx = (px_w - 1) / ((x1 - x0) or 1.0)
    sy = (px_h - 1) / ((hi - lo) or 1.0)
    last_x, last_y = px_w - 1, px_h - 1
    prev_x = prev_y = -1
    for x, y in points:
        cx = min(int((x - x0) * sx + 0.5), last_x)
        cy = last_y - min(max(int((y - lo) * sy + 0.5), 0), last_y)
        bits, cell = _DOTS_BY_X[cx & 1], cx >> 1
        if prev_x < 0 or prev_x == cx or prev_y == cy:
            grid[cy >> 2][cell] |= bits[cy & 3]
        else:
            for py in range(min(prev_y, cy), max(prev_y, cy) + 1):
                grid[py >> 2][cell] |= bits[py & 3]
        prev_x, prev_y = cx, cy
    return grid


class Plot(Widget):
    """Title line, then the curve; the target (if any) is drawn as a dashed line.

    Drawn with the Line API: the rows are rebuilt only when the data or the size change.
    """

    COMPONENT_CLASSES = {"plot--title", "plot--line", "plot--target", "plot--axis"}
    DEFAULT_CSS = """
    Plot { width: 1fr; height: 100%; padding: 0 1; }
    Plot > .plot--title { color: $foreground; text-style: bold; }
    Plot > .plot--line { color: $plot-line; }
    Plot > .plot--target { color: $plot-target; }
    Plot > .plot--axis { color: $muted; }
    Plot.eval > .plot--line { color: $plot-eval; }
    """

    def __init__(self, title: str, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._title = title
        self._points: tuple[tuple[float, float], ...] = ()
        self._source: Sequence[tuple[float, float]] | None = None
        self._target: float | None = None
        self._note = ""
        self._rows: list[Strip] | None = None
        self._rows_size: tuple[int, int] = (0, 0)
        self._styles: dict[str, Style] | None = None

    def set_data(
        self, points: Sequence[tuple[float, float]], target: float | None = None, note: str = ""
    ) -> None:
        if points is self._source and target == self._target and note == self._note:
            return  # the same (immutable, cached) series as last time: nothing to redraw
        self._source = points
        pts = tuple((x, y) for x, y in points if math.isfinite(x) and math.isfinite(y))
        if pts == self._points and target == self._target and note == self._note:
            return
        self._points, self._target, self._note = pts, target, note
        self._rows = None
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rows = None
        self._styles = None

    def _style_map(self) -> dict[str, Style]:
        if self._styles is None:
            base = self.rich_style
            self._styles = {"base": base}
            for name in ("title", "line", "target", "axis"):
                self._styles[name] = base + self.get_component_rich_style(f"plot--{name}")
        return self._styles

    @property
    def text(self) -> str:
        """The plot as plain text (for tests and screen readers)."""
        return "\n".join(strip.text for strip in self._build())

    def render_line(self, y: int) -> Strip:
        rows = self._build()
        return rows[y] if y < len(rows) else Strip.blank(self.size.width, self.rich_style)

    def _build(self) -> list[Strip]:
        size = (self.size.width, self.size.height)
        if self._rows is None or self._rows_size != size:
            self._rows, self._rows_size = self._draw(*size), size
        return self._rows

    def _draw(self, width: int, height: int) -> list[Strip]:
        style = self._style_map()
        base = style["base"]
        out = [[(f"{self._title} {self._note}".rstrip(), style["title"])]]
        rows = height - 1
        if not self._points:
            out.append([("no data yet", style["axis"])])
        elif rows >= 1:
            ys = [y for _, y in self._points]
            if self._target is not None:
                ys.append(self._target)
            lo, hi = min(ys), max(ys)
            if hi == lo:
                lo, hi = lo - 1.0, hi + 1.0
            label_w = 7
            labels = {0: f"{hi:.4g}", rows - 1: f"{lo:.4g}"}
            grid = raster(self._points, max(width - label_w, 1), rows, lo, hi)
            target_row = None
            if self._target is not None:
                target_row = min(int((hi - self._target) / (hi - lo) * (rows * 4 - 1) + 0.5) // 4, rows - 1)
            axis, line_st, target_st = style["axis"], style["line"], style["target"]
            for r, cells in enumerate(grid):
                row: list[tuple[str, Style]] = [(labels.get(r, "")[: label_w - 1].rjust(label_w - 1) + "│", axis)]
                blank, blank_st = ("╌", target_st) if r == target_row else (" ", base)
                for dots, run in groupby(cells, key=bool):  # one segment per run of drawn / empty cells
                    if dots:
                        row.append(("".join([chr(0x2800 + bits) for bits in run]), line_st))
                    else:
                        row.append((blank * sum(1 for _ in run), blank_st))
                out.append(row)
        return [Strip([Segment(text, st) for text, st in parts]).crop_extend(0, width, base) for parts in out]
