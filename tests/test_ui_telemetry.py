"""The selected run's own telemetry in the detail pane, from a real LOGDIR/<run>/telemetry.jsonl."""

from __future__ import annotations

import pytest
from ui_helpers import attach_app, mllog, screen_text, table, until

from perfwatch.core.telemetry.fake import FakeSampler
from perfwatch.core.telemetry.jsonl import append_record
from perfwatch.ui.widgets.run_telemetry import NONE_TEXT, RunTelemetry


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


def _record(t: float, cpu: float, rss: int, util: float, power: float) -> dict:
    gpu = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "util_sm": util, "mem_used": 40 << 30,
           "mem_total": 80 << 30, "power_w": power}
    return {"time": t, "run": "mlp.r0", "nprocs": 2, "pids": [11, 12], "cpu_percent": cpu, "rss": rss,
            "gpus": [gpu], "host_cpu_percent": 50.0}


@pytest.mark.parametrize("sampler", [None, FakeSampler], ids=["own-clock", "with-sampler"])
async def test_detail_shows_the_runs_telemetry_and_follows_new_samples(tmp_path, sampler):
    logdir = tmp_path / "campaign"
    run = logdir / "mlp.r0"
    run.mkdir(parents=True)
    (run / "mllog.txt").write_text(mllog("run_start", t=1000) + mllog("eval_accuracy", 0.5, t=2000))
    for i in range(20):
        append_record(run, _record(1.7e9 + i, cpu=150.0 + i, rss=1 << 30, util=90.0 + i % 5, power=600.0))
    with open(run / "telemetry.jsonl", "ab") as fh:
        fh.write(b'{"time": 1.8e9, "cpu_perc')  # a record cut short by a crash: skipped
        fh.write(b"\n")
    other = logdir / "results" / "result_0.txt"  # an attached MLPerf result log: no telemetry
    other.parent.mkdir()
    other.write_text(mllog("run_start", t=1000) + mllog("run_stop", t=5000, status="success"))

    app = attach_app(logdir, theme="dark", sampler=sampler() if sampler else None)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 2, "2 runs")
        table(app).select("mlp.r0")
        await until(pilot, lambda: "cpu 169%" in screen_text(app), "the run's CPU")
        text = screen_text(app)
        assert "rss 1.0G" in text
        assert "GPU0 util 94%" in text and "mem 40.0G" in text and "power 600W" in text
        assert any(c in text for c in "▁▂▃▄▅▆▇█")  # sparklines of the history

        append_record(run, _record(1.7e9 + 30, cpu=42.0, rss=2 << 30, util=12.0, power=150.0))
        await until(pilot, lambda: "cpu 42%" in screen_text(app), "the newly appended sample")
        text = screen_text(app)
        assert "rss 2.0G" in text and "GPU0 util 12%" in text and "power 150W" in text

        table(app).select("results/result_0")
        await until(pilot, lambda: NONE_TEXT in screen_text(app), "no telemetry for a result log")
        assert "cpu 42%" not in screen_text(app)
        assert app.query_one(RunTelemetry).text == NONE_TEXT
