"""Line charts drawn in braille: readable at a glance, cheap to repaint.

A `Plot` draws one or more series as connected lines (every pair of neighbouring points joined,
Bresenham in the 2×4 dots of each braille cell), with SI-formatted y labels ("1.31M", "15.1k")
and the unit in the title, a time axis (time since the run started, "0:00 … 5:18:57"), and an
optional target drawn as a dashed line and labelled with its value. Rates are drawn from zero
(`zero_based`), so a 2,338–2,350 samples/s wobble stays a flat line instead of filling the height.

Several series (the compare screen) each carry their own colour number, so one run keeps one
colour in every plot: `PALETTE_SIZE` colours (theme variables `plot-series-0` …), drawn solid,
then the same colours dashed, 20 distinct curves in all; the legend wraps onto as many lines
as it needs instead of cutting names.

Line API: the rows are rebuilt only when the data or the size change; the same (immutable)
series objects as last time return at once.

Drawn here rather than with textual-plotext: that adds two dependencies (plotext, textual-plotext)
and 237 ms of plotext import to the TUI's start-up (benchmarks/library_choices.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from perfwatch.core.ingest.sanitize import PLOT_LIMIT, plot_range

_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row][col] bits of a braille cell
SERIES_CLASSES = ("plot--line", "plot--line-2", "plot--line-3", "plot--line-4")
PALETTE_SIZE = 10  # colours of numbered series (`PlotLine.colour`); then the same colours, dashed
PALETTE_CLASSES = tuple(f"plot--series-{i}" for i in range(PALETTE_SIZE))
LABEL_W = 7  # y labels: "-1.31M" plus the axis


def fmt_si(v: float) -> str:
    """3 significant digits with an SI suffix: 1.31M, 15.1k, 561, 0.759."""
    if not math.isfinite(v):
        return "–"
    a = abs(v)
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= div * 0.9995:
            return f"{v / div:.3g}{unit}"
    if a == 0:
        return "0"
    return f"{v:.3g}"


def fmt_elapsed(ms: float) -> str:
    s = int(max(ms, 0.0) // 1000)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


@dataclass(frozen=True, slots=True)
class PlotLine:
    label: str
    points: Sequence[tuple[float, float]]  # (time_ms, value), time ascending
    colour: int | None = None  # a number the caller keeps per curve (same run, same colour); None: by position


def dashed(colour: int) -> bool:
    """Numbered series past the palette are drawn dashed in the palette's colours."""
    return (colour // PALETTE_SIZE) % 2 == 1


def raster(
    series: Sequence[Sequence[tuple[float, float]]], width: int, height: int,
    x0: float, x1: float, lo: float, hi: float, gaps: Sequence[bool] = (),
) -> tuple[list[list[int]], list[list[int]]]:
    """Braille bits and, per cell, the index of the series drawn last there (-1: none); a series
    whose `gaps` entry is true is drawn dashed (four dots on, four off along its line)."""
    bits = [[0] * width for _ in range(height)]
    owner = [[-1] * width for _ in range(height)]
    if width < 1 or height < 1:
        return bits, owner
    px_w, px_h = width * 2, height * 4
    sx = (px_w - 1) / (x1 - x0 if x1 - x0 > 1e-9 else 1.0)
    sy = (px_h - 1) / (hi - lo if hi - lo > 1e-12 else 1.0)

    def dot(px: int, py: int, k: int) -> None:
        if 0 <= px < px_w and 0 <= py < px_h:
            r, c = py >> 2, px >> 1
            bits[r][c] |= _DOTS[py & 3][px & 1]
            owner[r][c] = k

    for k, points in enumerate(series):
        prev: tuple[int, int] | None = None
        step = [0]
        gap = k < len(gaps) and gaps[k]

        def put(a: int, b: int, k: int = k, gap: bool = gap, step: list[int] = step) -> None:
            step[0] += 1
            if not gap or step[0] % 8 < 4:
                dot(a, b, k)

        for x, y in points:
            if not (math.isfinite(x) and math.isfinite(y)):
                continue
            px = int(round(min(max((x - x0) * sx, -1.0), float(px_w))))  # off-plot points: drawn to the edge
            py = (px_h - 1) - int(round((min(max(y, lo), hi) - lo) * sy))
            if prev is None:
                dot(px, py, k)
            else:
                _line(prev[0], prev[1], px, py, put)
            prev = (px, py)
    return bits, owner


def _line(x0: int, y0: int, x1: int, y1: int, put: Callable[[int, int], None]) -> None:
    """Bresenham: every dot between two points, so the curve is a line, not scattered dots."""
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    err = dx + dy
    while True:
        put(x0, y0)
        if x0 == x1 and y0 == y1:
            return
        e2 = 2 * err
        if e2 >= dy:
            err += dy
            x0 += sx
        if e2 <= dx:
            err += dx
            y0 += sy


class Plot(Widget):
    """Title (name, unit, latest value), the chart with y labels, a time axis; optional target line."""

    COMPONENT_CLASSES = {"plot--title", "plot--target", "plot--axis", *SERIES_CLASSES, *PALETTE_CLASSES}
    DEFAULT_CSS = """
    Plot { width: 1fr; height: 100%; padding: 0 1; }
    Plot > .plot--title { color: $foreground; text-style: bold; }
    Plot > .plot--line { color: $plot-line; }
    Plot > .plot--line-2 { color: $plot-eval; }
    Plot > .plot--line-3 { color: $status-paused; }
    Plot > .plot--line-4 { color: $status-stalled; }
    Plot > .plot--target { color: $plot-target; }
    Plot > .plot--axis { color: $muted; }
    Plot.eval > .plot--line { color: $plot-eval; }
    Plot.eval > .plot--line-2 { color: $plot-line; }
    Plot > .plot--series-0 { color: $plot-series-0; }
    Plot > .plot--series-1 { color: $plot-series-1; }
    Plot > .plot--series-2 { color: $plot-series-2; }
    Plot > .plot--series-3 { color: $plot-series-3; }
    Plot > .plot--series-4 { color: $plot-series-4; }
    Plot > .plot--series-5 { color: $plot-series-5; }
    Plot > .plot--series-6 { color: $plot-series-6; }
    Plot > .plot--series-7 { color: $plot-series-7; }
    Plot > .plot--series-8 { color: $plot-series-8; }
    Plot > .plot--series-9 { color: $plot-series-9; }
    """

    def __init__(self, title: str, *, unit: str = "", zero_based: bool = False, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._title = title
        self.unit = unit
        self.zero_based = zero_based
        self._series: tuple[PlotLine, ...] = ()
        self._sources: tuple[object, ...] = ()
        self._target: float | None = None
        self._target_label = ""
        self._note = ""
        self._start: float | None = None
        self._rows: list[Strip] | None = None
        self._rows_size: tuple[int, int] = (0, 0)
        self._styles: dict[str, Style] | None = None

    def set_data(
        self, points: Sequence[tuple[float, float]], target: float | None = None, note: str = "",
        *, start_ms: float | None = None, target_label: str = "target",
    ) -> None:
        """One series (the usual case)."""
        self.set_series([PlotLine("", points)] if points else [], target, note, start_ms=start_ms,
                        target_label=target_label)

    def set_series(
        self, series: Sequence[PlotLine], target: float | None = None, note: str = "", *,
        start_ms: float | None = None, target_label: str = "target", title: str | None = None,
    ) -> None:
        sources = tuple((id(s.points), s.colour) for s in series)
        same_meta = (target, note, start_ms, target_label, title or self._title) == (
            self._target, self._note, self._start, self._target_label, self._title)
        if sources == self._sources and same_meta:
            return  # the same (immutable, cached) series objects as last time: nothing to redraw
        self._sources = sources
        new = tuple(PlotLine(s.label, tuple(s.points), s.colour) for s in series)
        if new == self._series and same_meta:
            return
        self._series = new
        self._target, self._note, self._start, self._target_label = target, note, start_ms, target_label
        if title is not None:
            self._title = title
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
            for name in self.COMPONENT_CLASSES:
                self._styles[name] = base + self.get_component_rich_style(name)
        return self._styles

    def series_class(self, k: int) -> str:
        """The component class of the k-th series drawn: its own colour number, else its position."""
        colour = self._series[k].colour if k < len(self._series) else None
        return SERIES_CLASSES[k % len(SERIES_CLASSES)] if colour is None else PALETTE_CLASSES[colour % PALETTE_SIZE]

    def series_style(self, colour: int) -> Style:
        """The style a series numbered `colour` is drawn in (for a legend or table elsewhere)."""
        return self._style_map()[PALETTE_CLASSES[colour % PALETTE_SIZE]]

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

    def _title_text(self) -> str:
        unit = f" ({self.unit})" if self.unit else ""
        return f"{self._title}{unit} {self._note}".rstrip()

    def _draw(self, width: int, height: int) -> list[Strip]:
        st = self._style_map()
        base, axis = st["base"], st["plot--axis"]
        title: list[tuple[str, Style]] = [(self._title_text(), st["plot--title"])]
        if self._target is not None:
            title.append((f"  ╌ {self._target_label} {fmt_si(self._target)}".rstrip(), st["plot--target"]))
        out: list[list[tuple[str, Style]]] = [title]
        if len(self._series) > 1:  # a legend in the series' colours, wrapped to the width
            used = sum(len(text) for text, _ in title)
            for k, s in enumerate(self._series):
                mark = "┅" if s.colour is not None and dashed(s.colour) else "━"
                entry = f"{mark} {s.label}"
                if used and used + 2 + len(entry) > width and len(out) < max(height - 3, 1):
                    out.append([])
                    used = 0
                piece = f"  {entry}" if used else entry
                out[-1].append((piece, st[self.series_class(k)]))
                used += len(piece)
        points = [p for s in self._series for p in s.points if math.isfinite(p[0]) and math.isfinite(p[1])]
        rows = height - len(out) - 1  # title (and legend) lines, time axis
        if not points:
            out.append([("no data yet", axis)])
        elif rows >= 1:
            ys = [y for _, y in points]
            if self._target is not None:
                ys.append(self._target)
            lo, hi = min(ys), max(ys)
            if self.zero_based:
                lo, hi = min(lo, 0.0), max(hi, 0.0)
            lo, hi, clamped = plot_range(lo, hi)  # finite, non-empty: 1e308 or 5e-324 from a log cannot crash it
            if clamped:
                title.append((f"  clamped to ±{PLOT_LIMIT:g}", st["plot--target"]))
            x0 = self._start if self._start is not None else min(x for x, _ in points)
            x1 = max(x for x, _ in points)
            plot_w = max(width - LABEL_W, 1)
            gaps = [s.colour is not None and dashed(s.colour) for s in self._series]
            bits, owner = raster([s.points for s in self._series], plot_w, rows, x0, x1, lo, hi, gaps)
            labels = {0: fmt_si(hi), rows - 1: fmt_si(lo)}
            if rows >= 5:
                labels[(rows - 1) // 2] = fmt_si(hi - (hi - lo) * ((rows - 1) // 2) / (rows - 1))
            target_row = None
            tag = ""
            if self._target is not None:
                target_row = min(max(int((hi - self._target) / (hi - lo) * (rows - 1) + 0.5), 0), rows - 1)
                tag = f" {self._target_label} {fmt_si(self._target)}".rstrip()
            for r in range(rows):
                row: list[tuple[str, Style]] = [(labels.get(r, "")[: LABEL_W - 1].rjust(LABEL_W - 1) + "│", axis)]
                cells = bits[r]
                c = 0
                while c < plot_w:
                    if cells[c]:
                        k = owner[r][c]
                        start = c
                        while c < plot_w and cells[c] and owner[r][c] == k:
                            c += 1
                        style = st[self.series_class(k)]
                        row.append(("".join(chr(0x2800 + b) for b in cells[start:c]), style))
                    else:
                        start = c
                        while c < plot_w and not cells[c]:
                            c += 1
                        if r == target_row:
                            run = "╌" * (c - start)
                            if c == plot_w and tag and len(run) > len(tag) + 2:
                                run = run[: len(run) - len(tag)] + tag
                            row.append((run, st["plot--target"]))
                        else:
                            row.append((" " * (c - start), base))
                out.append(row)
            left, right = "0:00", fmt_elapsed(x1 - x0)  # time since the run started (or the first point)
            gap = max(plot_w - len(left) - len(right), 1)
            out.append([(" " * (LABEL_W - 1) + "└", axis), (left + " " * gap + right, axis)])
        return [Strip([Segment(text, s) for text, s in parts]).crop_extend(0, width, base) for parts in out]
