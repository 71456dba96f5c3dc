"""A small braille line plot with an optional horizontal target line."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row][col] bits of a braille cell


def raster(
    points: Sequence[tuple[float, float]], width: int, height: int, lo: float, hi: float
) -> list[list[int]]:
    """Braille bit masks, `height` rows × `width` cells, points joined column to column."""
    grid = [[0] * width for _ in range(height)]
    if not points or width < 1 or height < 1:
        return grid
    px_w, px_h = width * 2, height * 4
    x0, x1 = points[0][0], points[-1][0]
    span_x = (x1 - x0) or 1.0
    span_y = (hi - lo) or 1.0
    prev: tuple[int, int] | None = None
    for x, y in points:
        cx = min(int((x - x0) / span_x * (px_w - 1) + 0.5), px_w - 1)
        cy = px_h - 1 - min(max(int((y - lo) / span_y * (px_h - 1) + 0.5), 0), px_h - 1)
        ys = [cy] if prev is None or prev[0] == cx else range(min(prev[1], cy), max(prev[1], cy) + 1)
        for py in ys:
            grid[py // 4][cx // 2] |= _DOTS[py % 4][cx % 2]
        prev = (cx, cy)
    return grid


class Plot(Widget):
    """Title line, then the curve; the target (if any) is drawn as a dashed line.

    Drawn with the Line API: the rows are rebuilt only when the data or the size change.
    """

    COMPONENT_CLASSES = {"plot--title", "plot--line", "plot--target", "plot--axis"}

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._title = title
        self._points: tuple[tuple[float, float], ...] = ()
        self._target: float | None = None
        self._note = ""
        self._rows: list[Strip] | None = None
        self._rows_size: tuple[int, int] = (0, 0)
        self._styles: dict[str, Style] | None = None

    def set_data(
        self, points: Sequence[tuple[float, float]], target: float | None = None, note: str = ""
    ) -> None:
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
            for r, cells in enumerate(grid):
                line = [(labels.get(r, "")[: label_w - 1].rjust(label_w - 1) + "│", style["axis"])]
                for bits in cells:
                    if bits:
                        line.append((chr(0x2800 + bits), style["line"]))
                    elif r == target_row:
                        line.append(("╌", style["target"]))
                    else:
                        line.append((" ", base))
                out.append(line)
        strips = []
        for parts in out:
            segments: list[Segment] = []
            for text, st in parts:  # merge runs of one style into one segment
                if segments and segments[-1].style == st:
                    segments[-1] = Segment(segments[-1].text + text, st)
                else:
                    segments.append(Segment(text, st))
            strips.append(Strip(segments).crop_extend(0, width, base))
        return strips
