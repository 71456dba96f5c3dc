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
from decimal import Decimal
from pathlib import Path

import pytest
from launch_helpers import ROOT, campaign_file, wait_for
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from perfwatch.cli import main
from perfwatch.core.telemetry.types import GpuSample, GpuStatus, HostSample, Snapshot
from perfwatch.exporters.metrics import clean, families
from perfwatch.exporters.source import ExportSnapshot, LiveRun

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


class Fixed:
    """A collector answering with given families (the endpoint's output, exposed as prometheus_client does)."""

    def __init__(self, fams: list) -> None:
        self.fams = fams

    def collect(self) -> list:
        return self.fams


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


def state_of(metrics: dict, run: str) -> str | None:
    """The run's state: the one true member of its StateSet (exactly one while it is listed)."""
    true = [lab["perfwatch_run_state"] for lab, v in metrics.get("perfwatch_run_state", []) if lab["run"] == run and v]
    assert len(true) <= 1, true
    return true[0] if true else None


def value(metrics: dict, name: str, run: str) -> float | None:
    found = [v for labels, v in metrics.get(name, []) if labels.get("run") == run]
    assert len(found) <= 1, (name, found)
    return found[0] if found else None


@pytest.mark.slow
def test_scrape_while_a_campaign_runs_equals_report(tmp_path: Path) -> None:
    from perfwatch.core.measure.host_peak import cpu_peak

    cache = tmp_path / "cache"
    # a known CPU peak in this test's cache: report and endpoint both read it (MFU comparable, no benchmark)
    cpu_peak("fp32", threads=1, cache=cache / "perfwatch", measure_with=lambda _d, _t: 4.0e10)
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
            now = state_of(m, "mlp.r0")
            if now is not None and (not states or states[-1] != now):
                states.append(now)
            # the process exit (state) can come before perfwatch has read the log's last lines: wait for run_stop
            return bool(states) and states[-1] == "done" and bool(
                value(m, "perfwatch_run_time_to_train_seconds", "mlp.r0"))

        assert wait_for(mlp_done, timeout=90, step=0.2), f"states seen: {states}"
        assert states[0] in ("queued", "starting", "running") and states[-1] == "done", states
        m = scrape(port)
        assert state_of(m, "gate.r0") == "running"  # the campaign is still live
        info = {lab["run"]: lab for lab, _ in m["perfwatch_run_info"]}
        assert info["mlp.r0"] == {"campaign": "scrape", "logdir": str(logdir.resolve()), "hostname": socket.gethostname(),
                                  "run": "mlp.r0", "campaign_job": "mlp"}
        bench = [lab for lab, _ in m["perfwatch_run_benchmark_info"] if lab["run"] == "mlp.r0"]
        assert [b["benchmark"] for b in bench] == ["mlp_regression"]
        identity = {k: info["mlp.r0"][k] for k in ("campaign", "logdir", "hostname", "run")}
        for name, series in m.items():  # every per-run series carries exactly the run's identity labels
            if name.startswith("perfwatch_run_"):
                for labels, _ in series:
                    if labels["run"] == "mlp.r0":
                        extra = set(labels) - set(identity)
                        assert {k: labels[k] for k in identity} == identity and extra <= {
                            "campaign_job", "benchmark", "perfwatch_run_state"}, (name, labels)
                        assert "job" not in labels and "state" not in labels

        rep = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(logdir), "--format", "json"],
                             capture_output=True, text=True, env=env, timeout=120, check=True)
        row = next(r for r in json.loads(rep.stdout)["runs"] if r["run_id"] == "mlp.r0")
        assert row["mfu"] is not None and row["samples_per_s_window"] is not None  # nothing compared vacuously
        assert value(m, "perfwatch_run_samples_per_second", "mlp.r0") == pytest.approx(row["samples_per_s_window"])
        assert value(m, "perfwatch_run_samples_per_second_mean", "mlp.r0") == pytest.approx(row["throughput_mean"])
        assert value(m, "perfwatch_run_mfu_ratio", "mlp.r0") == pytest.approx(row["mfu"])
        assert value(m, "perfwatch_run_eval_best", "mlp.r0") == pytest.approx(row["best_eval"])
        # seconds from integer ms, without float noise: the decimal the report's ms give
        assert repr(value(m, "perfwatch_run_time_to_train_seconds", "mlp.r0")) == repr(
            float(Decimal(str(row["time_to_train_ms"])) / 1000))
        assert value(m, "perfwatch_run_bad_lines_total", "mlp.r0") == row["bad_lines"] == 0
        assert value(m, "perfwatch_run_target_reached", "mlp.r0") == 1.0 and row["target_reached"] is True
        assert value(m, "perfwatch_run_eval_target", "mlp.r0") == 0.4
        host_total = m["perfwatch_host_memory_total_bytes"]
        assert [lab for lab, _ in host_total] == [{"hostname": socket.gethostname()}] and host_total[0][1] > 0
        assert 0 <= m["perfwatch_host_cpu_utilization_ratio"][0][1] <= 1
        counts = {lab["state"]: v for lab, v in m["perfwatch_campaign_runs"] if v}
        assert counts == {"running": 1.0, "done": 1.0}

        gate.touch()
        # the endpoint outlives the campaign (--metrics-grace) so the final states are scraped
        assert wait_for(lambda: state_of(scrape(port), "gate.r0") == "done", timeout=60, step=0.2)
        # scrapes of the final states end the grace period long before its 120 s
        assert wait_for(lambda: scrape(port) == {}, timeout=60, step=0.5)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert f"metrics: http://127.0.0.1:{port}/metrics" in out and "--metrics-grace" in out
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


def test_gpu_series_carry_the_dcgm_exporters_labels() -> None:
    """Per-GPU series are labelled as the DCGM exporter labels its own (telemetry types, no NVML), in base units;
    which run holds a GPU is an info series, so the GPU's value series never change labels."""
    gpus = GpuStatus(True, gpus=(
        GpuSample(0, name="NVIDIA H100 80GB HBM3", uuid="GPU-aaa", bus_id="00000000:3B:00.0", util_sm=97.0,
                  mem_used=40 * 2**30, mem_total=80 * 2**30, power_w=650.5, temp_c=71.0, sm_clock=1980,
                  mem_clock=2619, throttle=("sw_power_cap",), energy_mj=5_000_123),
        GpuSample(1, name="NVIDIA H100 80GB HBM3", uuid="GPU-bbb", util_sm=0.0, throttle=()),
    ))
    tele = Snapshot(time=time.time(), gpu=gpus, host=HostSample(cpu_percent=12.5, mem_used=3, mem_total=8))
    snap = ExportSnapshot("c", Path("/nonexistent"), (LiveRun("r1", None, "job", "running", (0,), alive=True),), tele,
                        "/data/logdir", "node7")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(families(snap, {})))
    text = generate_latest(registry).decode()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in openmetrics_families(text) for s in fam.samples}
    gpu0 = (("Hostname", "node7"), ("UUID", "GPU-aaa"), ("gpu", "0"), ("modelName", "NVIDIA H100 80GB HBM3"),
            ("pci_bus_id", "00000000:3B:00.0"))
    assert got[("perfwatch_gpu_utilization_ratio", gpu0)] == 0.97
    assert got[("perfwatch_gpu_sm_clock_hertz", gpu0)] == 1.98e9
    assert got[("perfwatch_gpu_memory_total_bytes", gpu0)] == 80 * 2**30
    assert got[("perfwatch_gpu_energy_joules_total", gpu0)] == 5000.123
    assert got[("perfwatch_gpu_clock_event_reason", (*gpu0, ("reason", "sw_power_cap")))] == 1.0
    holder = tuple(sorted((*gpu0, ("campaign", "c"), ("logdir", "/data/logdir"), ("run", "r1"))))
    assert got[("perfwatch_gpu_run_info", holder)] == 1.0
    assert [k for k in got if k[0] == "perfwatch_gpu_run_info"] == [("perfwatch_gpu_run_info", holder)]  # GPU 1: nobody's
    assert got[("perfwatch_host_cpu_utilization_ratio", (("hostname", "node7"),))] == 0.125
    assert "# UNIT perfwatch_gpu_power_watts watts" in text and "# TYPE perfwatch_gpu_energy_joules counter" in text
    assert got[("perfwatch_run_info", (("campaign", "c"), ("campaign_job", "job"), ("hostname", "node7"),
                                       ("logdir", "/data/logdir"), ("run", "r1")))] == 1.0
    import re

    documented = set(re.findall(r"`(perfwatch_[a-z0-9_]+)`", (ROOT / "docs/metrics.md").read_text()))
    assert {s.name for fam in openmetrics_families(text) for s in fam.samples} <= documented  # every series


def test_state_is_a_stateset_and_the_series_keep_their_labels_from_queued_to_done() -> None:
    """A run's value series keep one label set for its whole life: state and benchmark never split them."""
    registry = CollectorRegistry(auto_describe=False)
    scrapes: list[dict[str, set[tuple[tuple[str, str], ...]]]] = []
    from perfwatch.core.model.status import RunStatus, State, Verdict, count

    for state in ("queued", "starting", "running", "done"):
        counts = count([RunStatus(State(state), Verdict.NO_TARGET, "", False, "queued")])  # the engine's
        snap = ExportSnapshot("c", Path("/nonexistent"), (LiveRun("r1", None, "job", state, ()),), None, "/l", "h",
                            counts)
        fixed = Fixed(families(snap, {}))
        registry.register(fixed)
        text = generate_latest(registry).decode()
        registry.unregister(fixed)
        seen: dict[str, set[tuple[tuple[str, str], ...]]] = {}
        for fam in openmetrics_families(text):
            for s in fam.samples:
                if s.name == "perfwatch_run_state":
                    assert s.value == (1.0 if s.labels["perfwatch_run_state"] == state else 0.0)
                if s.name == "perfwatch_campaign_runs":
                    assert s.value == (1.0 if s.labels["state"] == state else 0.0)
                seen.setdefault(s.name, set()).add(tuple(sorted(s.labels.items())))
        scrapes.append(seen)
    assert all(seen == scrapes[0] for seen in scrapes)  # the same series from queued to done
    assert scrapes[0]["perfwatch_run_info"] == {(("campaign", "c"), ("campaign_job", "job"), ("hostname", "h"),
                                                 ("logdir", "/l"), ("run", "r1"))}
    assert set(scrapes[0]) == {"perfwatch_run_info", "perfwatch_run_state", "perfwatch_campaign_runs",
                               "perfwatch_campaign_runs_target", "perfwatch_campaign_runs_failed"}
    states = {dict(labels)["perfwatch_run_state"] for labels in scrapes[0]["perfwatch_run_state"]}
    assert states == {w.value for w in State}  # the one vocabulary (core/model/status.py), every word listed


def test_values_carry_no_float_noise() -> None:
    assert 2010 * 1e-3 == 2.0100000000000002  # what a scaled multiplication gives
    assert clean(2010, 1000) == 2.01 and clean(1.23, 1e-3) == 1230.0 and clean(97.0, 100) == 0.97
    assert clean(float("nan")) is None and clean(float("inf")) is None and clean(None) is None
    assert clean(2**40) == 2**40  # bytes stay exact


def registry_for_exposition(tmp_path: Path) -> CollectorRegistry:
    """A registry answering the endpoint's families for a snapshot in which every family has a sample."""
    from perfwatch.core.engine import RunFigures
    from perfwatch.core.layout import rank_file
    from perfwatch.core.measure.energy import Energy, EnergyToTrain, RunEnergy
    from perfwatch.core.measure.eta import Eta
    from perfwatch.core.measure.mfu import Mfu
    from perfwatch.core.model.run import Run
    from perfwatch.core.telemetry.ranks import rank_report
    from perfwatch.core.telemetry.types import ProcTree
    from perfwatch.exporters.metrics import RUN_GAUGES

    log = tmp_path / "mllog.txt"
    records = [("submission_benchmark", "bert", 0), ("run_start", None, 1_000), ("eval_accuracy", 0.5, 61_000),
               ("run_stop", None, 62_000)]  # time-to-train too
    log.write_text("".join(":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME",
                                                     "key": k, "value": v, "metadata": {}}) + "\n"
                           for k, v, t in records))
    run = Run("r", str(log))
    run.feed_lines(log.read_bytes().split(b"\n"))
    gpus = GpuStatus(True, gpus=(GpuSample(0, name="NVIDIA H100", uuid="GPU-a", bus_id="00000000:3B:00.0",
                                           util_sm=50.0, util_mem=20.0, mem_used=1, mem_total=2, power_w=3.0,
                                           power_limit_w=4.0, temp_c=5.0, sm_clock=6, mem_clock=7,
                                           throttle=("sw_power_cap",), energy_mj=8),))
    tele = Snapshot(time=time.time(), gpu=gpus, host=HostSample(cpu_percent=1.0, mem_used=1, mem_total=2),
                    runs={"r": ProcTree(pids=(1,), cpu_percent=50.0, rss=10)})
    for rank in (0, 1):  # a distributed run: two ranks' timing files
        path = rank_file(tmp_path, rank)
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"kind": "rank", "rank": rank, "node": "n0", "t": 1.0}) + "\n"
                        + json.dumps({"kind": "steps", "t": 2.0, "steps": 2, "step_s": [0.1, 0.2 + rank],
                                      "span_s": 10.0, "coll_s": 1.0, "data_s": 0.5}) + "\n")
    energy = Energy(1.0, 1, "counter", 1.0, 1.0)  # what the engine publishes for the run: figures and energy
    live = LiveRun("r", run.view(), "j", "running", (0,), Eta("converging", at_ms=150_000, plus_minus_ms=1_000),
                   alive=True, figures=RunFigures(1.0, 1.0, Mfu(0.5, None, 1.0, 2.0, 1, 1.0, "log", None),
                                                  samples_now=1.0, tokens_now=1.0, samples_avg=1.0),
                   energy=RunEnergy(EnergyToTrain(energy, 1.0, False), energy), ranks=rank_report(tmp_path))
    rows = {"r": {key: 1 for _, _, key, _, _ in RUN_GAUGES}}  # the telemetry columns of its report row
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(families(ExportSnapshot("c", tmp_path, (live,), tele, "/l", "h"), rows)))
    return registry


def exposition(tmp_path: Path) -> str:
    """The endpoint's OpenMetrics text for a snapshot in which every family has a sample."""
    return generate_latest(registry_for_exposition(tmp_path)).decode()


# unit ids of Grafana's value formats (packages/grafana-data/src/valueFormats/categories.ts) the dashboard may use
GRAFANA_UNITS = {"none", "short", "percentunit", "s", "bytes", "decbytes", "watt", "joule", "celsius", "hertz"}


def test_the_grafana_dashboard_is_valid_and_queries_only_exported_series(tmp_path: Path) -> None:
    """Grafana's classic dashboard JSON model (what *Import* reads): panels with unique ids, a 24-column
    gridPos, unique refIds, template variables for campaign, LOGDIR and host; every query names series the
    endpoint exports, with labels those series carry."""
    import re

    dash = json.loads((ROOT / "docs/grafana/perfwatch.json").read_text())
    labels_of: dict[str, set[str]] = {}
    for fam in openmetrics_families(exposition(tmp_path)):
        for sample in fam.samples:
            labels_of.setdefault(sample.name, set()).update(sample.labels)
    assert {"perfwatch_run_info", "perfwatch_run_state", "perfwatch_gpu_run_info"} <= set(labels_of)
    assert isinstance(dash["title"], str) and isinstance(dash["uid"], str) and len(dash["uid"]) <= 40
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36  # Grafana 9+ (timeseries, uid)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("campaign", "logdir", "hostname"):  # the dashboard filters by campaign, LOGDIR and host
        assert variables[name]["type"] == "query" and variables[name]["multi"] and variables[name]["includeAll"]
    exprs = [v["definition"] for v in variables.values() if v["type"] == "query"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    for panel in dash["panels"]:
        pos = panel["gridPos"]
        assert set(pos) == {"h", "w", "x", "y"} and all(isinstance(v, int) and v >= 0 for v in pos.values())
        assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0, panel["title"]
        assert panel["type"] in ("timeseries", "table", "stat") and panel["datasource"]["uid"] == "${datasource}"
        assert panel["fieldConfig"]["defaults"]["unit"] in GRAFANA_UNITS, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
        exprs += [t["expr"] for t in panel["targets"]]
    used_vars: set[str] = set()
    for expr in exprs:
        used_vars |= set(re.findall(r"\$(\w+)", expr))
        for name, selector in re.findall(r"(perfwatch_[a-z0-9_]+)(\{[^}]*\})?", expr):
            assert name in labels_of, (name, expr)
            used = set(re.findall(r"(\w+)\s*=~?", selector))
            assert used <= labels_of[name], (name, used - labels_of[name])
        for group in re.findall(r"(?:by|on)\s*\(([^)]*)\)", expr):
            for label in (g.strip() for g in group.split(",")):
                assert any(label in labels for labels in labels_of.values()), (label, expr)
        assert "job" not in re.findall(r"(\w+)\s*=~?", expr)  # Prometheus's own label, never perfwatch's
    assert used_vars <= set(variables) and {"campaign", "logdir", "hostname"} <= used_vars
    gpu = [e for e in exprs if "perfwatch_gpu_" in e and "run_info" not in e.split("and")[0]]
    assert gpu and all("$hostname" in e and "$campaign" in e for e in gpu)  # GPU panels filter by host and campaign
    host = [e for e in exprs if "perfwatch_host_" in e]
    assert host and all("$hostname" in e for e in host)


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
        ExportSnapshot("c", tmp_path, runs, None), {}) for s in fam.samples if s.name.startswith("perfwatch_run_eta"))
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

        assert wait_for(lambda: state_of(scrape(port), "hold.r0") == "running", timeout=30)
        gate.touch()
        assert wait_for(lambda: state_of(scrape(port), "hold.r0") == "done", timeout=30)  # grace period
        assert wait_for(lambda: scrape(port) == {}, timeout=30)  # final states scraped: the owner and endpoint end
        assert "all runs succeeded" in (logdir / "scheduler.out").read_text()
    finally:
        gate.touch()


class FixedSource:
    """A source whose snapshot is set by the test (the endpoint's input, as the engine publishes it)."""

    def __init__(self, snap: ExportSnapshot) -> None:
        self.snap = snap

    def snapshot(self) -> ExportSnapshot:
        return self.snap

    def close(self) -> None:
        pass


def test_the_grace_period_waits_for_two_scrapes_of_a_finished_campaign() -> None:
    import threading

    from perfwatch.exporters.metrics import MetricsServer

    server = MetricsServer("127.0.0.1", 0)
    try:
        running = ExportSnapshot("c", Path("/nonexistent"), (LiveRun("r", None, "j", "running", ()),), None, "/l", "h")
        source = FixedSource(running)
        server.serve(source)
        assert not server.campaign_over()  # runs go on: quitting closes at once
        source.snap = ExportSnapshot("c", Path("/nonexistent"), (LiveRun("r", None, "j", "done", ()),), None,
                                   "/l", "h")
        assert server.campaign_over()
        waiting = threading.Thread(target=server.linger, args=(600,))
        waiting.start()
        seen: list[str | None] = []

        def scraped_until_it_ends() -> bool:
            seen.append(state_of(scrape(server.port), "r"))
            return not waiting.is_alive()

        assert wait_for(scraped_until_it_ends, timeout=60, step=0.2)  # scrapes end it, long before 600 s
        assert seen[0] == "done"
    finally:
        server.close()
