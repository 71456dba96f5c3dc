"""The selected run's own telemetry in the detail pane, from a real LOGDIR/<run>/telemetry.jsonl, or from
the per-node files of a run sampled on compute nodes (Slurm): one line per node and the total."""

from __future__ import annotations

import json

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


def _node_record(node: str, t: float, cpu: float, rss: int, gpus: list[dict]) -> dict:
    """A record as the node sampler writes it (telemetry/node.py: jsonl.run_record plus "node")."""
    return {"time": t, "run": "bert.r0", "nprocs": 2, "pids": [11, 12], "cpu_percent": cpu, "rss": rss,
            "gpus": gpus, "host_cpu_percent": 50.0, "host_mem_used": 8 << 30, "node": node}


def _gpu(index: int, uuid: str, util: float, mem_gib: int, power: float, energy_mj: int | None = None) -> dict:
    gpu = {"index": index, "name": "NVIDIA H100 80GB HBM3", "uuid": uuid, "util_sm": util, "mem_used": mem_gib << 30,
           "mem_total": 80 << 30, "power_w": power, "run_pids": [12], "run_mem": 1 << 30, "other_procs": 0}
    if energy_mj is not None:
        gpu["energy_mj"] = energy_mj
    return gpu


def _words(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]


async def test_detail_shows_each_node_and_the_total_of_a_run_on_two_nodes(tmp_path):
    from test_energy import T0, _mllog

    from perfwatch.core.layout import node_telemetry_name

    logdir = tmp_path / "campaign"
    run = logdir / "bert.r0"
    run.mkdir(parents=True)
    _mllog(run / "mllog.txt", T0 + 2.5, T0 + 7.5, samples=6500)
    with open(run / node_telemetry_name("n1"), "w") as f:  # two GPUs with the energy counter: 300 and 200 J/s
        for i in range(11):
            gpus = [_gpu(0, "GPU-a", 90.0, 40, 300.0, 10_000_000 + 300_000 * i),
                    _gpu(1, "GPU-b", 70.0, 30, 200.0, 20_000_000 + 200_000 * i)]
            f.write(json.dumps(_node_record("n1", T0 + i, 150.0, 1 << 30, gpus)) + "\n")

    app = attach_app(logdir, theme="dark")
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 1, "the run")
        table(app).select("bert.r0")
        # one node so far: the run's telemetry looks as a local run's (process tree, one line per GPU)
        await until(pilot, lambda: "GPU1 util 70%" in screen_text(app), "the first node's GPUs")
        widget = app.query_one(RunTelemetry)
        assert "cpu 150%" in widget.text and "total" not in widget.text

        with open(run / node_telemetry_name("n2"), "w") as f:  # the second node starts later: no energy counter
            for i in range(11):
                gpus = [_gpu(0, "GPU-c", 50.0, 20, 150.0)]
                f.write(json.dumps(_node_record("n2", T0 + 0.5 + i, 20.0, 512 << 20, gpus)) + "\n")
        await until(pilot, lambda: "total" in widget.text and "3.25 kJ" in widget.text, "each node and the total")
        lines = _words(widget.text)
        shown = _words(screen_text(app))
        assert all(any(line in row for row in shown) for line in lines)  # all three lines on screen
        energy_cell = table(app)._rows["bert.r0"].cells["energy"]
    # by hand from the records: the newest sample of each node; energy-to-train from run_start (T0 + 2.5 s)
    # to run_stop (T0 + 7.5 s): n1 (300 + 200 J/s) x 5 s = 2.50 kJ, n2 150 W x 5 s = 0.75 kJ; the run 3.25 kJ
    assert lines == [
        "n1 2 GPU util 80% power 500W mem 70.0G energy 2.50 kJ cpu 150% rss 1.0G",
        "n2 1 GPU util 50% power 150W mem 20.0G energy 0.75 kJ cpu 20% rss 512.0M",
        "total 3 GPU util 70% power 650W mem 90.0G energy 3.25 kJ cpu 170% rss 1.5G",
    ]
    assert energy_cell == "3.25 kJ"  # the runs table shows the total's number
