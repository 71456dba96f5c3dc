"""A long run's telemetry.jsonl: `report` summarises it in one streaming pass (RSS bounded, measured from
outside with psutil) and the metrics endpoint follows it incrementally (a scrape parses only what was
appended since the last), both giving exactly the telemetry columns of the row `report` gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_tree_links import peak_rss

SRC = Path(__file__).parent / "data/mlperf-logs/v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_0.txt"
GPUS = 8


def record(t: float, k: int) -> str:
    return json.dumps({"time": t, "run": "job.r0", "cpu_percent": 100.0 + k % 7, "rss": 10**9, "gpus": [
        {"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA A100-SXM4-80GB", "util_sm": 90.0 + (k + i) % 10,
         "mem_used": 7 * 10**10, "power_w": 300.0 + (k * i) % 50, "energy_mj": k * 300000 + i, "throttle": []}
        for i in range(GPUS)]}, separators=(",", ":")) + "\n"


def run_folder(tmp_path: Path, samples: int) -> tuple[Path, float]:
    run = tmp_path / "logs" / "job.r0"
    run.mkdir(parents=True)
    text = SRC.read_text()
    (run / "mllog.txt").write_text(text)
    first = next(line for line in text.splitlines() if '"run_start"' in line)
    t0 = json.loads(first.split(":::MLLOG ", 1)[1])["time_ms"] / 1000
    with open(run / "telemetry.jsonl", "w") as fh:
        for k in range(samples):
            fh.write(record(t0 + k, k))
    return run, t0


def test_report_summarises_a_large_telemetry_file_in_a_streaming_pass(tmp_path: Path) -> None:
    run, _ = run_folder(tmp_path, 20_000)  # ~25 MB, 160,000 GPU samples
    proc = subprocess.Popen([sys.executable, "-m", "perfwatch", "report", str(run.parent), "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = peak_rss(proc, timeout=300)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    row = json.loads(proc.stdout.read() if proc.stdout else "")["runs"][0]
    assert row["telemetry_samples"] == 20_000 and row["gpu_util_max"] == 99.0
    # every record held as dicts was ~180 MB here; the streaming pass keeps numbers, not records
    assert peak < 120 * 2**20, f"RSS {peak / 2**20:.0f} MB"


def test_the_metrics_endpoint_follows_telemetry_incrementally(tmp_path: Path) -> None:
    from perfwatch.core.model import book as runbook
    from perfwatch.core.results.summary import metrics_columns, run_row
    from perfwatch.exporters.metrics import TelemetryRows
    from perfwatch.exporters.source import ExportSnapshot, LiveRun

    run, t0 = run_folder(tmp_path, 300)
    root = run.parent
    view = runbook.load(root).views()[0]
    snap = ExportSnapshot("c", root, (LiveRun(view.run_id, view, "job", "running", ()),), None)
    cache = TelemetryRows()

    def report_row() -> dict:  # what `report` gives, to the number, for the columns the endpoint reads from it
        row = run_row(view, root, metrics_columns(logdir=root))
        return {k: row[k] for k in first}

    first = cache.rows(snap)[view.run_id]
    assert {"gpu_util_mean", "power_mean_w", "cpu_mean", "telemetry_samples"} <= set(first)
    assert first == report_row()
    tele = cache._telemetry[view.run_id]
    follower = tele._followers[str(run / "telemetry.jsonl")]  # the run's one telemetry file (no Slurm nodes)
    read_before = follower._tail.bytes_read
    more = "".join(record(t0 + k, k) for k in range(300, 310))
    with open(run / "telemetry.jsonl", "a") as fh:
        fh.write(more)
    second = cache.rows(snap)[view.run_id]
    assert follower._tail.bytes_read - read_before == len(more)  # only the appended samples were read
    assert second["telemetry_samples"] == 310 and first["telemetry_samples"] == 300
    assert second == report_row()
    assert cache.rows(snap)[view.run_id] is second  # nothing new: the cached row
    cache.close()


@pytest.mark.parametrize("bad", ["", "{not json\n", "[1, 2]\n"])
def test_a_replaced_file_starts_the_summary_over(tmp_path: Path, bad: str) -> None:
    from perfwatch.core.measure.columns import LiveTelemetry

    run, t0 = run_folder(tmp_path, 5)
    live = LiveTelemetry(str(run / "telemetry.jsonl"))
    assert live.poll() and live.columns.samples == 5
    (run / "telemetry.jsonl").write_text(bad + record(t0, 0))  # a restarted attempt's new file
    assert live.poll() and live.columns.samples == 1
