"""Line charts as inline SVG: no script, no stylesheet, no fonts from anywhere (the HTML report).

Every string that reaches the markup goes through `html.escape`; numbers are formatted here.
Built with f-strings, not jinja2: jinja2 is no dependency of `report --format html` (only the web
extra brings it) and its import alone adds 123 ms (benchmarks/library_choices.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from perfwatch.core.ingest.sanitize import PLOT_LIMIT, plot_range
from perfwatch.text.escape import printable

# readable on white, distinguishable in pairs (Okabe-Ito, then darker variants)
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C6D31",
           "#7B3294", "#1B7837")
MAX_POINTS = 800  # per series: more than a chart this wide can show


def esc(text: object) -> str:
    """For HTML text and attributes: markup escaped, terminal control characters made visible."""
    return escape(printable(str(text)))


@dataclass(frozen=True, slots=True)
class ChartLine:
    label: str
    points: Sequence[tuple[float, float]]  # (x, y), x increasing


@dataclass(frozen=True, slots=True)
class HLine:
    label: str
    y: float


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    x_label: str
    y_label: str
    series: Sequence[ChartLine]
    hlines: Sequence[HLine] = field(default_factory=tuple)
    chart_id: str = ""


def thin(points: Sequence[tuple[float, float]], limit: int = MAX_POINTS) -> list[tuple[float, float]]:
    """At most `limit` points: bucket means (keeps the shape of a day-long 1 Hz series)."""
    pts = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    if len(pts) <= limit:
        return pts
    size = len(pts) / limit
    out = []
    for i in range(limit):
        chunk = pts[int(i * size): int((i + 1) * size)] or [pts[-1]]
        out.append((sum(p[0] for p in chunk) / len(chunk), sum(p[1] for p in chunk) / len(chunk)))
    return out


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 2.5, 5 x 10^k steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    if not (math.isfinite(raw) and raw > 1e-300):  # a span no tick step can cover: callers use plot_range
        return []
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step + 1e-9)
    ticks = [round(first * step, 12)]
    while ticks[-1] < hi - step * 1e-9:  # the last tick is at or above hi: every point is inside
        ticks.append(round((first + len(ticks)) * step, 12))
    return ticks


def fmt_num(v: float) -> str:
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:g}G"
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:.4g}"


def render(chart: Chart, width: int = 600, height: int = 280) -> str:
    """One <svg> element (or a short note when there is nothing to draw)."""
    series = [ChartLine(s.label, thin(s.points)) for s in chart.series]
    series = [s for s in series if s.points]
    if not series:
        return f'<p class="empty">{esc(chart.title)}: no data</p>'
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points] + [h.y for h in chart.hlines]
    lo_x = min(xs)
    # finite, non-empty axes (core/ingest/sanitize.py): values beyond the plot limit are drawn at the edge
    ax0, ax1, clamped_x = plot_range(0.0 if lo_x >= 0 else lo_x, max(xs))  # time axes start at 0 (run_start)
    lo_y = min(ys)
    ay0, ay1, clamped_y = plot_range(min(lo_y, 0.0) if lo_y >= 0 else lo_y, max(ys))
    xt, yt = nice_ticks(ax0, ax1) or [ax0, ax1], nice_ticks(ay0, ay1) or [ay0, ay1]
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]
    title = chart.title + (f" (values beyond ±{PLOT_LIMIT:g} drawn at the edge)" if clamped_x or clamped_y else "")
    left, right, top, bottom = 64, 16, 28, 44
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (min(max(x, x0), x1) - x0) / ((x1 - x0) or 1) * pw

    def py(y: float) -> float:
        return top + ph - (min(max(y, y0), y1) - y0) / ((y1 - y0) or 1) * ph

    cid = f' id="{esc(chart.chart_id)}"' if chart.chart_id else ""
    out = [f'<svg{cid} class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
           f"<title>{esc(title)}</title>",
           f'<text x="{left}" y="18" class="ct">{esc(title)}</text>']
    for t in yt:
        y = py(t)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{esc(fmt_num(t))}</text>')
    for t in xt:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" class="grid"/>'
                   f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle" class="tick">{esc(fmt_num(t))}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 6}" text-anchor="middle" class="axis">'
               f"{esc(chart.x_label)}</text>")
    out.append(f'<text transform="translate(14 {top + ph / 2:.1f}) rotate(-90)" text-anchor="middle" class="axis">'
               f"{esc(chart.y_label)}</text>")
    for h in chart.hlines:
        y = py(h.y)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="target">'
                   f"<title>{esc(h.label)}</title></line>"
                   f'<text x="{left + pw - 4}" y="{y - 4:.1f}" text-anchor="end" class="tick">{esc(h.label)}</text>')
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        dash = "" if i < len(PALETTE) else ' stroke-dasharray="5 3"'
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
        if len(s.points) == 1:
            x, y = s.points[0]
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                       f"<title>{esc(s.label)}</title></circle>")
        else:
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}>'
                       f"<title>{esc(s.label)}</title></polyline>")
    out.append("</svg>")
    legend = "".join(
        f'<li><span class="sw" style="background:{PALETTE[i % len(PALETTE)]}"></span>{esc(s.label)}</li>'
        for i, s in enumerate(series))
    return "".join(out) + f'<ul class="legend">{legend}</ul>'
