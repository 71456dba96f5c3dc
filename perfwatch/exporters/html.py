"""`perfwatch report LOGDIR --format html`: one self-contained page to share.

The tables are `perfwatch report`'s (the same rows and cell texts as the text and markdown forms);
the plots are inline SVG (exporters/svg.py): throughput over time and the eval metric against its
target per benchmark, and each run's telemetry. No script, no external stylesheet, font or image:
the file opens offline. Every string from a log is escaped. No template engine, for the reason
given in exporters/svg.py (jinja2: not a dependency of this path, +123 ms import).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfwatch.core.model.book import RunBook
from perfwatch.core.model.view import RunView
from perfwatch.core.results.summary import (
    BENCH_COLUMNS,
    RUN_COLUMNS,
    Report,
    cells,
    counts_line,
    shown_columns,
)
from perfwatch.core.telemetry.jsonl import read_telemetry
from perfwatch.exporters import svg
from perfwatch.exporters.svg import esc

_STYLE = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1b1b1b;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px}.meta{color:#555;margin:0 0 12px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
th,td{padding:3px 5px;border-bottom:1px solid #e4e4e4;text-align:left;white-space:nowrap}
th{background:#f3f3f3;position:sticky;top:0}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{color:#a40000}.wrap{overflow-x:auto}
.charts{display:flex;flex-wrap:wrap;gap:8px 24px}.chart-box{flex:0 0 600px;max-width:600px}
svg.chart{background:#fff}svg .grid{stroke:#e8e8e8}svg .tick{font-size:11px;fill:#555}
svg .axis{font-size:12px;fill:#333}svg .ct{font-size:13px;font-weight:600;fill:#1b1b1b}
svg .target{stroke:#a40000;stroke-dasharray:6 4;stroke-width:1.2}
ul.legend{list-style:none;padding:0;margin:2px 0 0 64px;font-size:11.5px;max-width:536px}
ul.legend li{display:inline-block;margin:0 12px 2px 0}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
p.empty{color:#777;font-style:italic}
"""

_NUMERIC = {k for k, _, d in RUN_COLUMNS + BENCH_COLUMNS if d > 0} | {"runs", "converged", "bad_lines"}


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str, int]], table_id: str) -> str:
    columns = shown_columns(rows, columns)
    head = "".join(f"<th>{esc(h)}</th>" for _, h, _ in columns)
    body = []
    for row, texts in zip(rows, cells(rows, columns), strict=True):
        bad = row.get("status") not in (None, "success", "running") or row.get("compliance") == "fail"
        tds = "".join(f'<td class="n">{esc(t)}</td>' if k in _NUMERIC else f"<td>{esc(t)}</td>"
                      for (k, _, _), t in zip(columns, texts, strict=True))
        body.append(f'<tr{" class=fail" if bad else ""}>{tds}</tr>')
    return f'<div class="wrap"><table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}' \
           f"</tbody></table></div>"


def _origin(v: RunView) -> float | None:
    return v.run_start_ms if v.run_start_ms is not None else v.first_time_ms


def _time_unit(span_s: float) -> tuple[str, float]:
    """(unit name, seconds per unit) that keeps the axis labels short for this span."""
    if span_s < 120:
        return "seconds", 1.0
    if span_s < 3 * 3600:
        return "minutes", 60.0
    return "hours", 3600.0


def _rebase(points: Sequence[tuple[float, float]], origin: float, per_unit: float) -> list[tuple[float, float]]:
    """(time, y) with time made relative to `origin` and expressed in units of `per_unit` (same clock)."""
    return [((t - origin) / per_unit, y) for t, y in points]


def _bench_charts(bench: str, views: list[RunView], n: int) -> str:
    thr, evals, targets = [], [], {}
    spans = [(v.last_time_ms or o) - o for v in views if (o := _origin(v)) is not None]
    unit, per_unit = _time_unit(max(spans, default=0.0) / 1000.0)
    for v in views:
        origin = _origin(v)
        if origin is None:
            continue
        thr.append(svg.ChartLine(v.run_id, _rebase(v.throughput, origin, per_unit * 1000.0)))
        evals.append(svg.ChartLine(v.run_id, _rebase([(e.time_ms, e.value) for e in v.evals], origin, per_unit * 1000.0)))
        if v.target is not None:
            targets[v.target.describe()] = v.target.value
    key = next((v.target.key for v in views if v.target is not None), None) or "eval metric"
    x_label = f"{unit} since run_start"
    charts = [
        svg.Chart(f"Throughput — {bench}", x_label, "samples/s", thr, chart_id=f"throughput-{n}"),
        svg.Chart(f"{key} vs target — {bench}", x_label, key, evals,
                  [svg.HLine(f"target {d}", y) for d, y in targets.items()], chart_id=f"eval-{n}"),
    ]
    return '<div class="charts">' + "".join(f'<div class="chart-box">{svg.render(c)}</div>' for c in charts) + "</div>"


def _telemetry_series(records: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per tick (seconds since the run's first sample): GPU util (mean over the run's GPUs), GPU power
    (sum), CPU % of the run's processes."""
    t0 = next((r["time"] for r in records if isinstance(r.get("time"), int | float)), None)
    out: dict[str, list[tuple[float, float]]] = {"gpu": [], "power": [], "cpu": []}
    if t0 is None:
        return out
    for r in records:
        t = r.get("time")
        if not isinstance(t, int | float):
            continue
        x = t - t0
        gpus = [g for g in r.get("gpus") or () if isinstance(g, dict)]
        utils = [g["util_sm"] for g in gpus if isinstance(g.get("util_sm"), int | float)]
        power = [g["power_w"] for g in gpus if isinstance(g.get("power_w"), int | float)]
        if utils:
            out["gpu"].append((x, sum(utils) / len(utils)))
        if power:
            out["power"].append((x, sum(power)))
        if isinstance(r.get("cpu_percent"), int | float):
            out["cpu"].append((x, float(r["cpu_percent"])))
    return out


def _telemetry(views: list[RunView]) -> str:
    per_run = {}
    for v in views:
        if v.path:
            records = read_telemetry(Path(v.path).parent)
            if records:
                per_run[v.run_id] = _telemetry_series(records)
    if not per_run:
        return '<p class="empty">No telemetry.jsonl beside these logs (perfwatch records it for the runs it ' \
               "launches).</p>"
    span = max((p[-1][0] for s in per_run.values() for p in s.values() if p), default=0.0)
    unit, per_unit = _time_unit(span)
    x_label = f"{unit} since the run's first sample"

    def series(kind: str) -> list[svg.ChartLine]:
        return [svg.ChartLine(r, [(x / per_unit, y) for x, y in s[kind]]) for r, s in per_run.items()]

    charts = [
        svg.Chart("GPU utilization", x_label, "%", series("gpu"), chart_id="telemetry-gpu"),
        svg.Chart("GPU power", x_label, "W", series("power"), chart_id="telemetry-power"),
        svg.Chart("CPU of the run's processes", x_label, "%", series("cpu"), chart_id="telemetry-cpu"),
    ]
    return '<div class="charts">' + "".join(f'<div class="chart-box">{svg.render(c)}</div>' for c in charts) + "</div>"


def render(report: Report, book: RunBook, *, title: str | None = None, now: float | None = None) -> str:
    """The whole page as one string."""
    views = book.views()
    root = str(book.root)
    heading = title or f"perfwatch report — {root}"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(now if now is not None else time.time()))
    by_bench: dict[str, list[RunView]] = {}
    for v in views:
        by_bench.setdefault(v.benchmark or "(no benchmark)", []).append(v)
    sections = []
    for n, (bench, members) in enumerate(by_bench.items()):
        sections.append(f"<h3>{esc(bench)} ({len(members)} run{'s' if len(members) != 1 else ''})</h3>")
        sections.append(_bench_charts(bench, members, n))
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(heading)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{esc(heading)}</h1>",
        f'<p class="meta">{len(report.runs)} runs, {len(report.benchmarks)} benchmark groups · generated {esc(stamp)} '
        "by perfwatch report --format html</p>",
        f'<p class="counts">{esc(counts_line(report))}</p>' if report.counts is not None else "",
        "<h2>Benchmarks (olympic time-to-train)</h2>",
        _table(report.benchmarks, BENCH_COLUMNS, "benchmarks"),
        "<h2>Runs</h2>",
        _table(report.runs, RUN_COLUMNS, "runs"),
        "<h2>Throughput and eval vs target</h2>",
        *sections,
        "<h2>Telemetry</h2>",
        _telemetry(views),
        "</body></html>\n",
    ])
