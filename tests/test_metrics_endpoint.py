"""The Prometheus/OpenMetrics endpoint, scraped over HTTP while a real campaign runs.

Expected values come from `perfwatch report --format json` (a separate process reading the
logs from disk), parsed with prometheus_client's own exposition parser.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_launch_helpers import ROOT, campaign_file, wait_for

from perfwatch.cli import main
from perfwatch.core.telemetry.types import GpuSample, GpuStatus, HostSample, Snapshot
from perfwatch.exporters.metrics import families
from perfwatch.exporters.source import LiveRun, LiveSnapshot

CAMPAIGN = f"""
name: scrape
scheduler: {{max_parallel: 2}}
defaults: {{threads: 1, precision: fp32, timeout: 3m}}
jobs:
  - name: mlp
    benchmark: mlp_regression
    cmd: [{sys.executable}, {ROOT}/workloads/mlp.py]
    args: {{--hidden: 64, --depth: 2, --train-samples: 2048, --eval-samples: 512, --batch-size: 128,
           --target: 0.4, --log-interval: 0.05, --seed: "{{seed}}"}}
    target: {{key: eval_accuracy, value: 0.4}}
  - name: gate
    cmd: [{sys.executable}, {ROOT}/tests/workloads_fake/fake.py, --gate, GATE, --epochs, "2"]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """{metric name: [(labels, value)]} or {} while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return {}
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(metrics: dict, name: str, run: str) -> float | None:
    found = [v for labels, v in metrics.get(name, []) if labels.get("run") == run]
    assert len(found) <= 1, (name, found)
    return found[0] if found else None


@pytest.mark.slow
def test_scrape_while_a_campaign_runs_equals_report(tmp_path: Path) -> None:
    from perfwatch.core.measure.peaks import cpu_peak

    cache = tmp_path / "cache"
    # a known CPU peak in this test's cache: report and endpoint both read it (MFU comparable, no benchmark)
    cpu_peak("fp32", threads=1, cache=cache / "perfwatch", measure=lambda _d, _t: 4.0e10)
    gate = tmp_path / "gate"
    camp = campaign_file(tmp_path, CAMPAIGN.replace("GATE", str(gate)))
    logdir, port = tmp_path / "logdir", free_port()
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfwatch", "launch", str(camp), "--headless", "--logdir", str(logdir),
         "--metrics-port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        states: list[str] = []

        def mlp_done() -> bool:
            m = scrape(port)
            for labels, _ in m.get("perfwatch_run_info", []):
                if labels["run"] == "mlp.r0" and (not states or states[-1] != labels["state"]):
                    states.append(labels["state"])
            # the process exit (state) can come before perfwatch has read the log's last lines: wait for run_stop
            return bool(states) and states[-1] == "done" and bool(
                value(m, "perfwatch_run_time_to_train_seconds", "mlp.r0"))

        assert wait_for(mlp_done, timeout=90, step=0.2), f"states seen: {states}"
        assert states[0] in ("queued", "starting", "running") and states[-1] == "done", states
        m = scrape(port)
        info = {lab["run"]: lab for lab, _ in m["perfwatch_run_info"]}
        assert info["gate.r0"]["state"] == "running"  # the campaign is still live
        assert info["mlp.r0"]["job"] == "mlp" and info["mlp.r0"]["benchmark"] == "mlp_regression"
        assert info["mlp.r0"]["campaign"] == "scrape"

        rep = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(logdir), "--format", "json"],
                             capture_output=True, text=True, env=env, timeout=120, check=True)
        row = next(r for r in json.loads(rep.stdout)["runs"] if r["run_id"] == "mlp.r0")
        assert row["mfu"] is not None and row["samples_per_s_window"] is not None  # nothing compared vacuously
        assert value(m, "perfwatch_run_samples_per_second", "mlp.r0") == pytest.approx(row["samples_per_s_window"])
        assert value(m, "perfwatch_run_samples_per_second_mean", "mlp.r0") == pytest.approx(row["throughput_mean"])
        assert value(m, "perfwatch_run_mfu_ratio", "mlp.r0") == pytest.approx(row["mfu"])
        assert value(m, "perfwatch_run_eval_best", "mlp.r0") == pytest.approx(row["best_eval"])
        assert value(m, "perfwatch_run_time_to_train_seconds", "mlp.r0") == pytest.approx(
            row["time_to_train_ms"] / 1000)
        assert value(m, "perfwatch_run_bad_lines", "mlp.r0") == row["bad_lines"] == 0
        assert value(m, "perfwatch_run_target_reached", "mlp.r0") == 1.0 and row["target_reached"] is True
        assert value(m, "perfwatch_run_eval_target", "mlp.r0") == 0.4
        assert value(m, "perfwatch_host_memory_total_bytes", "") is None  # host gauges carry no run label
        assert m["perfwatch_host_memory_total_bytes"][0][1] > 0
        counts = {lab["state"]: v for lab, v in m["perfwatch_campaign_runs"]}
        assert counts == {"running": 1.0, "done": 1.0}

        gate.touch()
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert f"metrics: http://127.0.0.1:{port}/metrics" in out
        assert scrape(port) == {}  # the endpoint went away with perfwatch
    finally:
        if proc.poll() is None:
            gate.touch()
            proc.kill()
            proc.wait()


def test_a_bad_metrics_port_is_a_clear_error_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    camp = campaign_file(tmp_path, f"""
        name: bad
        jobs:
          - name: a
            cmd: [{sys.executable}, {ROOT}/tests/workloads_fake/fake.py]
        """)
    logdir = tmp_path / "logdir"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["launch", str(camp), "--headless", "--logdir", str(logdir), "--metrics-port", str(port)]) == 2
        err = capsys.readouterr().err
        assert f"--metrics-port {port}" in err and "in use" in err and "Traceback" not in err
        assert not logdir.exists()  # nothing was created, nothing started
        assert main(["attach", str(tmp_path), "--headless", "--metrics-port", str(port)]) == 2
        assert "in use" in capsys.readouterr().err
    for bad in ("70000", "0", "-1"):
        assert main(["launch", str(camp), "--headless", "--logdir", str(logdir), "--metrics-port", bad]) == 2
        assert "out of range (1-65535)" in capsys.readouterr().err
    assert not logdir.exists()


def test_gpu_and_host_gauges_name_the_run_on_each_gpu() -> None:
    """Per-GPU series carry index, uuid, name and the run holding the GPU (telemetry types, no NVML)."""
    gpus = GpuStatus(True, gpus=(
        GpuSample(0, name="NVIDIA H100 80GB HBM3", uuid="GPU-aaa", util_sm=97.0, mem_used=40 * 2**30,
                  mem_total=80 * 2**30, power_w=650.5, temp_c=71.0, sm_clock=1980, mem_clock=2619,
                  throttle=("sw_power_cap",)),
        GpuSample(1, name="NVIDIA H100 80GB HBM3", uuid="GPU-bbb", util_sm=0.0, throttle=()),
    ))
    tele = Snapshot(time=time.time(), gpu=gpus, host=HostSample(cpu_percent=12.5, mem_used=3, mem_total=8))
    snap = LiveSnapshot("c", Path("/nonexistent"), (LiveRun("r1", None, "job", "running", (0,), alive=True),), tele)
    text = "".join(f"{s.name} {s.labels} {s.value}\n" for fam in families(snap, {}) for s in fam.samples)
    assert ("perfwatch_gpu_utilization_percent {'gpu': '0', 'uuid': 'GPU-aaa', 'name': 'NVIDIA H100 80GB HBM3', "
            "'run': 'r1'} 97.0") in text
    assert "perfwatch_gpu_sm_clock_hertz {'gpu': '0'" in text and "1980000000.0" in text
    assert "'run': ''} 0.0" in text  # GPU 1 is nobody's
    assert "perfwatch_gpu_clock_event_reason {'gpu': '0', 'uuid': 'GPU-aaa', 'name': 'NVIDIA H100 80GB HBM3', " \
           "'run': 'r1', 'reason': 'sw_power_cap'} 1.0" in text
    assert "perfwatch_host_cpu_percent {} 12.5" in text
    import re

    documented = set(re.findall(r"`(perfwatch_[a-z_]+)`", (ROOT / "docs/metrics.md").read_text()))
    assert {fam.name for fam in families(snap, {})} <= documented  # every family the endpoint can emit
    assert "perfwatch_run_info {'campaign': 'c', 'run': 'r1', 'job': 'job', 'benchmark': '', 'state': 'running'}" in text


def test_the_grafana_dashboard_uses_only_documented_metrics() -> None:
    import re

    dash = (ROOT / "docs/grafana/perfwatch.json").read_text()
    json.loads(dash)
    used = set(re.findall(r"perfwatch_[a-z_]+", dash))
    documented = set(re.findall(r"`(perfwatch_[a-z_]+)`", (ROOT / "docs/metrics.md").read_text()))
    assert len(used) >= 10 and used <= documented, used - documented


def test_eta_gauges_come_from_the_engines_eta(tmp_path: Path) -> None:
    """A converging run exports time left and its uncertainty; a lower-bound ETA exports no uncertainty."""
    from perfwatch.core.measure.eta import Eta
    from perfwatch.core.model.run import Run

    log = tmp_path / "mllog.txt"
    records = [("run_start", None, 1_000), ("eval_accuracy", 0.5, 61_000)]
    log.write_text("".join(":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME",
                                                     "key": k, "value": v, "metadata": {}}) + "\n"
                           for k, v, t in records))
    run = Run("r", str(log))
    run.feed_lines(log.read_bytes().split(b"\n"))
    view = run.view()  # 60 s since run_start
    runs = (LiveRun("r", view, "j", "running", (), Eta("converging", at_ms=150_000, plus_minus_ms=15_000)),
            LiveRun("s", view, "j", "running", (), Eta("converging", at_ms=90_000)))
    text = "".join(f"{s.name} {s.labels['run']} {s.value}\n" for fam in families(
        LiveSnapshot("c", tmp_path, runs, None), {}) for s in fam.samples if s.name.startswith("perfwatch_run_eta"))
    assert text.splitlines() == ["perfwatch_run_eta_seconds r 90.0", "perfwatch_run_eta_seconds s 30.0",
                                 "perfwatch_run_eta_plus_minus_seconds r 15.0"]


def test_the_detached_owner_serves_the_metrics(tmp_path: Path) -> None:
    """`launch --detach --metrics-port`: the background owner listens for as long as the campaign runs."""
    gate = tmp_path / "gate"
    camp = campaign_file(tmp_path, f"""
        name: bg
        jobs:
          - name: hold
            cmd: [{sys.executable}, {ROOT}/tests/workloads_fake/fake.py, --gate, {gate}, --epochs, "2"]
        """)
    logdir, port = tmp_path / "logdir", free_port()
    out = subprocess.run([sys.executable, "-m", "perfwatch", "launch", str(camp), "--detach", "--logdir", str(logdir),
                          "--metrics-port", str(port)], capture_output=True, text=True, timeout=60)
    try:
        assert out.returncode == 0, out.stderr
        assert f"metrics: http://127.0.0.1:{port}/metrics" in out.stdout

        def hold_state() -> str | None:
            labels = [lab for lab, _ in scrape(port).get("perfwatch_run_info", []) if lab["run"] == "hold.r0"]
            return labels[0]["state"] if labels else None

        assert wait_for(lambda: hold_state() == "running", timeout=30)
        gate.touch()
        assert wait_for(lambda: scrape(port) == {}, timeout=30)  # campaign over: the owner and its endpoint end
        assert "all runs succeeded" in (logdir / "scheduler.out").read_text()
    finally:
        gate.touch()
