"""Hostile numbers from disk through every output: `Infinity`, `NaN` and 1e308 watts in telemetry.jsonl,
evals of +-1.7e308, 5e-324 and 5e16 in the log. Every value is checked finite and in range before any
arithmetic: nothing crashes, JSON is strict (null, never a bare NaN), means are over the valid samples
only, and plots clamp and say so."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import scrape_once
from prometheus_client.parser import text_string_to_metric_families

SRC = Path(__file__).parent / "data/mlperf-logs/v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_0.txt"
HOSTILE_EVALS = [1.7e308, -1.7e308, 5e-324, 5e16]
GOOD_WATTS = [250.0, 300.0, 275.0]


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    run = tmp_path / "logs" / "job.r0"
    run.mkdir(parents=True)
    lines, n = [], 0
    for line in SRC.read_text().splitlines():
        if '"eval_accuracy"' in line and n < len(HOSTILE_EVALS):
            rec = json.loads(line.split(":::MLLOG ", 1)[1])
            rec["value"] = HOSTILE_EVALS[n]
            n += 1
            line = ":::MLLOG " + json.dumps(rec)
        lines.append(line)
    (run / "mllog.txt").write_text("\n".join(lines) + "\n")
    first = next(line for line in lines if '"run_start"' in line)
    t0 = json.loads(first.split(":::MLLOG ", 1)[1])["time_ms"] / 1000
    tele = []
    for k, w in enumerate(GOOD_WATTS):
        tele.append(json.dumps({"time": t0 + k, "gpus": [{"index": 0, "power_w": w, "util_sm": 50}]}))
    # written as Python's json writes non-finite floats (and as a hand edit would)
    tele.append(f'{{"time": {t0 + 3}, "gpus": [{{"index": 0, "power_w": Infinity, "util_sm": NaN}}]}}')
    tele.append(f'{{"time": {t0 + 4}, "gpus": [{{"index": 0, "power_w": 1e308, "util_sm": 1e308}}], '
                '"cpu_percent": -Infinity, "rss": 1e400}')
    tele.append('{"time": Infinity, "gpus": [{"index": 0, "power_w": 1e17}]}')
    (run / "telemetry.jsonl").write_text("\n".join(tele) + "\n")
    return tmp_path / "logs"


def perfwatch(*args: str, ok: tuple[int, ...] = (0,)) -> str:
    out = subprocess.run([sys.executable, "-m", "perfwatch", *args], capture_output=True, text=True, timeout=300)
    assert out.returncode in ok and "Traceback" not in out.stderr, out.stderr[-3000:]
    return out.stdout


def strict_json(text: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"bare {name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def test_report_every_format(hostile: Path) -> None:
    data = strict_json(perfwatch("report", str(hostile), "--format", "json"))
    assert isinstance(data, dict)
    run = data["runs"][0]
    assert run["power_mean_w"] == pytest.approx(math.fsum(GOOD_WATTS) / len(GOOD_WATTS))  # the valid samples only
    assert run["power_max_w"] == max(GOOD_WATTS) and run["gpu_util_mean"] == 50
    assert run["best_eval"] is not None and abs(run["best_eval"]) < 1e18  # +-1.7e308 are not evals
    assert run["evals"] == 9 - 2  # the two beyond range are left out; 5e-324 and 5e16 are numbers
    table = perfwatch("report", str(hostile))
    assert not re.search(r"\b(inf|nan)\b", table.lower()), table
    cells = list(csv.reader(io.StringIO(perfwatch("report", str(hostile), "--format", "csv"))))
    assert not any(c.lower() in ("inf", "-inf", "nan") for r in cells for c in r)
    perfwatch("report", str(hostile), "--format", "markdown")
    html = perfwatch("report", str(hostile), "--format", "html")
    assert "</html>" in html and f"values beyond ±{1e15:g} drawn at the edge" in html  # the 5e16 eval


def test_compare_and_attach_once(hostile: Path) -> None:
    strict_json(perfwatch("compare", str(hostile), str(hostile), "--format", "json", ok=(0, 1)))  # 1: no score
    once = perfwatch("attach", str(hostile), "--once")
    assert "job.r0" in once


def test_metrics_endpoint(hostile: Path) -> None:
    from perfwatch.core.model import book as runbook
    from perfwatch.exporters.source import ExportSnapshot, LiveRun

    book = runbook.load(hostile)
    snap = ExportSnapshot("camp", hostile, tuple(LiveRun(v.run_id, v, "job", "succeeded", ()) for v in book.views()),
                        None)

    text = scrape_once(snap)
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert values["perfwatch_run_power_mean_watts"] == pytest.approx(275.0)
    assert all(math.isfinite(v) for v in values.values())


async def test_the_live_plot_survives_extreme_values() -> None:
    from test_ui_plot import _One

    from perfwatch.ui.widgets.plot import Plot, PlotLine

    plot = Plot("eval")
    async with _One(plot).run_test(size=(60, 12)) as pilot:
        for points in ([(0.0, 0.0), (1.0, 5e-324)], [(0.0, 1e300), (1.0, -1e300), (2.0, 0.5)],
                       [(0.0, 0.7), (5e-324, 0.8)], [(0.0, 0.5), (1.0, 5e16)]):
            plot.set_series([PlotLine("", points)], target=0.759)
            await pilot.pause()
            assert plot.text.splitlines()[0].startswith("eval")
        assert "clamped to ±1e+15" in plot.text.splitlines()[0]
