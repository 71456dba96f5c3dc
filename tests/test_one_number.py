"""One number everywhere: the live view, `--headless` and `report` show the same time-to-train and
throughput for every bundled run, and the same GPU energy-to-train for runs whose telemetry recorded it,
because they read the same core computation."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from ui_helpers import attach_app, table, until

from perfwatch.ui.format import fmt_duration, fmt_rate


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


def _cli(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "perfwatch", *args], capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


async def test_tui_headless_and_report_agree(mlperf_logs):
    report = {r["run_id"]: r for r in json.loads(_cli("report", str(mlperf_logs), "--format", "json"))["runs"]}
    headless = {}
    for line in _cli("attach", str(mlperf_logs), "--once").splitlines():
        m = re.search(r"\]\s+(\S+)\s.*?(?:time-to-train ([\d.]+) min)?\s*(?:avg ([\d.]+) samples/s)?$", line)
        if m and m.group(1) in report:
            headless[m.group(1)] = (m.group(2), m.group(3))
    assert len(report) == len(headless) == 35

    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        await until(pilot, lambda: app.main.settled, "every row painted")
        rows = table(app)._rows
        for rid, r in report.items():
            ttt_min, avg = headless[rid]
            cells = rows[rid].cells
            if r["time_to_train_ms"] is not None:
                assert float(ttt_min) == pytest.approx(r["time_to_train_min"], abs=1e-4)  # printed with 4 decimals
                assert cells["time"].split()[0] == fmt_duration(r["time_to_train_ms"])
            if r["throughput_mean"] is not None:
                assert float(avg) == pytest.approx(r["throughput_mean"], abs=1e-2)  # printed with 2 decimals
                assert cells["tp_avg"] == fmt_rate(r["throughput_mean"])
            assert r["energy_to_train_kj"] is None and cells["energy"] == "–"  # no telemetry in MLPerf results


async def test_energy_to_train_is_one_number_in_the_tui_headless_and_report(tmp_path):
    from test_energy import energy_logdir

    logdir = energy_logdir(tmp_path)
    report = {r["run_id"]: r for r in json.loads(_cli("report", str(logdir), "--format", "json"))["runs"]}
    headless = {}
    for line in _cli("attach", str(logdir), "--once").splitlines():
        m = re.search(r"\]\s+(\S+)\s.*energy-to-train ([\d.]+) kJ \((.+)\)", line)
        if m:
            headless[m.group(1)] = (float(m.group(2)), m.group(3))
    app = attach_app(logdir, theme="dark")
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: all(table(app)._rows.get(r) is not None
                                       and table(app)._rows[r].cells["energy"] != "–" for r in ("gpu.r0", "pow.r0")),
                    "both GPU runs' energy")
        cells = {rid: row.cells["energy"] for rid, row in table(app)._rows.items()}
    # by hand (see test_energy.energy_logdir): 1250 J from the counter, 750 J from integrated power, no GPU on cpu.r0
    for rid, kj, how, cell in (("gpu.r0", 1.25, "NVML counter", "1.25 kJ"),
                               ("pow.r0", 0.75, "∫power, estimated", "0.75 kJ")):
        assert report[rid]["energy_to_train_kj"] == pytest.approx(kj)
        assert headless[rid] == (pytest.approx(kj, abs=5e-4), how)  # printed with 3 decimals
        assert cells[rid] == cell
    assert report["cpu.r0"]["energy_to_train_kj"] is None and "cpu.r0" not in headless and cells["cpu.r0"] == "–"
