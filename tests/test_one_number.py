"""One number everywhere: the live view, `--headless` and `report` show the same time-to-train and
throughput for every bundled run, and the same GPU energy-to-train for runs whose telemetry recorded it,
because they read the same core computation."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
from ui_helpers import attach_app, table, until, written_now

from perfwatch.ui.format import fmt_duration, fmt_rate


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


def _cli(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "perfwatch", *args], capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


async def test_tui_headless_report_and_metrics_agree(mlperf_logs):
    """Every bundled run: the same state, target verdict, time-to-train, throughput now and on average,
    and the same counts in the TUI, `--headless`, `report` and the metrics endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    rep = json.loads(_cli("report", str(mlperf_logs), "--format", "json"))
    report = {r["run_id"]: r for r in rep["runs"]}
    headless = {}
    pattern = (r"\]\s+(\S+)\s+(\S+)\s+(reached|not reached|no target)\s.*?(?:(?:time-to-train|ran) ([\d.]+) min)?"
               r"\s*(?:now ([\d.]+) samples/s)?\s*(?:avg ([\d.]+) samples/s)?$")
    once = _cli("attach", str(mlperf_logs), "--once")
    for line in once.splitlines():
        m = re.search(pattern, line)
        if m and m.group(1) in report:
            headless[m.group(1)] = m.groups()[1:]
    assert len(report) == len(headless) == 35
    counts = rep["counts"]
    assert counts["runs"] == 35 and counts["failed"] == 1 and counts["no_target"] == 20  # the aborted Krai run
    assert (f"{counts['states']['done']} done, 1 aborted; target: {counts['reached']} reached, 1 not reached, "
            f"20 no target; 1 failed") in once

    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        await until(pilot, lambda: app.main.settled, "every row painted")
        rows = table(app)._rows
        header = str(app.main.query_one("#header-bar").render())
        metrics = {f.name: f for f in text_string_to_metric_families(_metrics_text(app.session))}
    assert (f"35 runs  {counts['states']['done']} done  1 aborted  target: {counts['reached']} reached, "
            f"1 not reached, 20 no target  1 failed") in header

    def metric(name: str, rid: str) -> float | None:
        return next((s.value for s in metrics[name].samples if s.labels["run"] == rid), None)

    states = {s.labels["run"]: s.labels["perfwatch_run_state"] for s in metrics["perfwatch_run_state"].samples
              if s.value == 1}
    for rid, r in report.items():
        word, verdict, ttt_min, now, avg = headless[rid]
        cells = rows[rid].cells
        assert r["status"] == word == cells["state"].split()[-1] == states[rid], rid
        assert r["target_verdict"] == verdict, rid
        if r["time_to_train_ms"] is not None:
            assert float(ttt_min) == pytest.approx(r["time_to_train_min"], abs=1e-4)  # printed with 4 decimals
            assert cells["time"].split()[0] == fmt_duration(r["time_to_train_ms"])
            assert metric("perfwatch_run_time_to_train_seconds", rid) == pytest.approx(r["time_to_train_ms"] / 1000)
        if r["throughput_mean"] is not None:
            assert float(avg) == pytest.approx(r["throughput_mean"], abs=1e-2)  # printed with 2 decimals
            assert cells["tp_avg"] == fmt_rate(r["throughput_mean"])
            assert metric("perfwatch_run_samples_per_second_mean", rid) == pytest.approx(r["throughput_mean"])
        if r["samples_per_s_window"] is not None:  # "now": the rolling window, the rate MFU is computed from
            assert float(now) == pytest.approx(r["samples_per_s_window"], abs=1e-2)
            assert cells["tp_now"] == fmt_rate(r["samples_per_s_window"])
            assert metric("perfwatch_run_samples_per_second", rid) == pytest.approx(r["samples_per_s_window"])
        assert r["mfu"] is None and cells["mfu"] == "–"  # these logs name no FLOPs: no MFU anywhere
        assert r["energy_to_train_kj"] is None and cells["energy"] == "–"  # no telemetry in MLPerf results
        assert cells["eta"] == "–" and metric("perfwatch_run_eta_seconds", rid) is None  # every run has ended
    # compare: the same runs, converged runs and score per benchmark folder as report's
    bench = next(b for b in rep["benchmarks"] if b["folder"].endswith("Krai/results/7920T_2xA5000_mxnet22.08/resnet"))
    folder = mlperf_logs / bench["folder"]
    side = json.loads(_cli("compare", str(folder), str(folder), "--format", "json"))[0]["a"]
    assert (side["runs"], side["converged"]) == (bench["runs"], bench["converged"]) == (5, 4)
    assert side["score_minutes"] == pytest.approx(bench["score_minutes"])
    members = [r for r in report.values() if r["run_id"].startswith(bench["folder"] + "/")]
    assert sum(not r["failed"] for r in members) == side["converged"]  # the aborted run is the failed one


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


def two_node_logdir(root) -> tuple:
    """A finished run sampled on two compute nodes (Slurm), its telemetry written by the node sampler's own
    code (telemetry/node.py `record_sample`) over scripted NVML GPUs: n1 has two GPUs with the energy
    counter, n2 one GPU without it. Returns (LOGDIR, run folder)."""
    from test_energy import T0, _mllog

    from perfwatch.core.telemetry.fake import GIB, FakeGpu, FakeSampler
    from perfwatch.core.telemetry.node import record_sample

    logdir = root / "logdir"
    run = logdir / "bert.r0"
    run.mkdir(parents=True)
    _mllog(run / "mllog.txt", T0 + 2.5, T0 + 7.5, samples=6500)
    now = [T0]
    a = FakeGpu(power_mw=300_000, energy_mj=10_000_000, util_gpu=90, mem_used=40 * GIB, compute_procs=[(4242, GIB)])
    b = FakeGpu(power_mw=200_000, energy_mj=20_000_000, util_gpu=70, mem_used=30 * GIB, compute_procs=[(4242, GIB)])
    c = FakeGpu(power_mw=150_000, util_gpu=50, mem_used=20 * GIB, compute_procs=[(4343, GIB)])
    n1, n2 = FakeSampler([a, b], clock=lambda: now[0]), FakeSampler([c], clock=lambda: now[0] + 0.5)
    n2.fail("energy_mj", "NotSupported")
    for i in range(11):  # n1 samples at T0 + 0..10 s, n2 at T0 + 0.5..10.5 s
        now[0] = T0 + i
        a.energy_mj, b.energy_mj = 10_000_000 + 300_000 * i, 20_000_000 + 200_000 * i  # 300 J/s and 200 J/s
        assert record_sample(n1, run, "n1", (4242,)) is not None
        assert record_sample(n2, run, "n2", (4343,)) is not None
    return logdir, run


# by hand, from the numbers above: run_start T0 + 2.5 s, run_stop T0 + 7.5 s (5 s)
# n1: counters 300 J/s + 200 J/s -> 2500 J to train, 5000 J over its 10 s of samples
# n2: no counter, a flat 150 W integrated -> 750 J to train, 1500 J over its 10 s
# the run: 3250 J = 3.25 kJ to train (6500 samples / 3250 J = 2 samples/J), 6.50 kJ whole
async def test_a_two_node_runs_energy_is_one_number_in_the_snapshot_tui_report_and_metrics(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from perfwatch.core.layout import node_telemetry_name

    logdir, run = two_node_logdir(tmp_path)
    assert sorted(p.name for p in run.glob("telemetry*")) == [node_telemetry_name("n1"), node_telemetry_name("n2")]
    (row,) = json.loads(_cli("report", str(logdir), "--format", "json"))["runs"]
    assert row["energy_to_train_kj"] == pytest.approx(3.25) and row["energy_run_kj"] == pytest.approx(6.5)
    assert row["samples_per_j"] == pytest.approx(2.0)
    (line,) = [x for x in _cli("attach", str(logdir), "--once").splitlines() if "bert.r0" in x and "energy" in x]
    assert "energy-to-train 3.250 kJ (NVML counter + ∫power, estimated)" in line

    app = attach_app(logdir, theme="dark")
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: table(app)._rows.get("bert.r0") is not None
                    and table(app)._rows["bert.r0"].cells["energy"] != "–", "the run's energy")
        cell = table(app)._rows["bert.r0"].cells["energy"]
        table(app).select("bert.r0")
        await until(pilot, lambda: app.engine.snapshot.selected.by_node is not None
                    and app.engine.snapshot.selected.by_node.total.energy is not None, "the selected run's nodes")
        snap = app.engine.snapshot
        metrics = {f.name: f for f in text_string_to_metric_families(_metrics_text(app.session))}
    live = snap.energy["bert.r0"]
    assert live.to_train is not None and live.whole is not None
    # the same number, not a close one: the snapshot's joules are report's kJ x 1000
    assert live.to_train.energy.kj == row["energy_to_train_kj"] and live.whole.kj == row["energy_run_kj"]
    assert live.to_train.samples_per_joule == row["samples_per_j"]
    assert cell == "3.25 kJ"
    (sample,) = [s for s in metrics["perfwatch_run_energy_to_train_joules"].samples if s.labels["run"] == "bert.r0"]
    assert sample.value == live.to_train.energy.joules == pytest.approx(3250.0)
    by_node = snap.selected.by_node
    assert by_node is not None and [n.node for n in by_node.nodes] == ["n1", "n2"]
    assert by_node.total.energy == live  # the total is the run's own number
    n1, n2 = by_node.nodes
    assert n1.energy is not None and n1.energy.to_train is not None and n2.energy is not None
    assert n2.energy.to_train is not None
    assert (n1.energy.to_train.energy.joules, n2.energy.to_train.energy.joules) == (pytest.approx(2500.0),
                                                                                     pytest.approx(750.0))


# ---- states and counts: a real campaign whose runs end every way a run can end -------------------------
FAKE = "tests/workloads_fake/fake.py"
TARGET = "target: {key: eval_accuracy, value: 0.9, higher_is_better: true}"
CAMPAIGN = f"""
name: truth
scheduler: {{max_parallel: 5}}
defaults: {{repeat: 1, grace: 2s, exit_at_target: false}}
jobs:
  - name: reach
    {TARGET}
    cmd: [python, {FAKE}, --mode, no_stop, --epochs, "3", --step, "0.05"]
  - name: hang
    {TARGET}
    cmd: [python, {FAKE}, --mode, hang, --epochs, "5", --step, "0.05"]
  - name: crash
    {TARGET}
    cmd: [python, {FAKE}, --mode, crash, --epochs, "5", --step, "0.05"]
  - name: early
    {TARGET}
    cmd: [python, -c, "import sys; sys.exit(2)"]
  - name: plain
    cmd: [python, {FAKE}, --mode, ok, --epochs, "3", --step, "0.05"]
  - name: later
    cmd: [python, {FAKE}, --mode, ok, --epochs, "3", --step, "0.05"]
"""
# what each run must be shown as, from what this test does to it (not from perfwatch's code):
# (state word, reason contains, target verdict, failed)
EXPECTED = {
    "reach.r0": ("stopped", "stopped by user", "reached", False),  # stopped after its target was reached
    "hang.r0": ("killed", "killed by user", "not reached", True),
    "crash.r0": ("crashed", "crashed with exit 3", "not reached", True),
    "early.r0": ("crashed", "crashed with exit 2", "not reached", True),  # exit 2 before a single record
    "plain.r0": ("done", "", "no target", False),
    "later.r0": ("stopped", "cancelled before it started", "no target", True),  # stopped while queued
}
COUNTS = {"runs": 6, "states": {"done": 1, "stopped": 2, "killed": 1, "crashed": 2},
          "reached": 1, "not_reached": 3, "no_target": 2, "failed": 4}


def _metrics_text(session) -> str:
    """One scrape of the real endpoint (`--metrics-port`: an HTTP server on its own thread) serving `session`."""
    import urllib.request

    from perfwatch.exporters.metrics import MetricsServer
    from perfwatch.exporters.source import SessionSource

    server = MetricsServer("127.0.0.1", 0)  # a free port
    try:
        server.serve(SessionSource(session))
        with urllib.request.urlopen(server.url, timeout=30) as resp:
            return resp.read().decode()
    finally:
        server.close()


async def test_every_front_end_shows_the_same_states_and_counts_as_the_tui(tmp_path):
    from launch_helpers import ROOT, campaign_file, kill_groups
    from prometheus_client.parser import text_string_to_metric_families

    from perfwatch.core.control.campaign import load_campaign
    from perfwatch.core.engine import launch_session
    from perfwatch.ui.app import PerfwatchApp
    from perfwatch.ui.widgets.detail import DetailPane

    logdir = (tmp_path / "logdir").resolve()
    session = launch_session(load_campaign(campaign_file(tmp_path, CAMPAIGN), base=ROOT), logdir)
    ctl = session.controller
    assert ctl is not None
    ctl.stop("later.r0")  # still queued: cancelled before it ever starts
    app = PerfwatchApp(session, theme="dark", control_interval=0.1)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            def state(rid: str) -> str | None:
                snap = app.engine.snapshot
                status = snap.statuses.get(rid) if snap is not None else None
                return status.word if status is not None else None

            def reached(rid: str) -> bool:
                snap = app.engine.snapshot
                view = snap.views.get(rid) if snap is not None else None
                return view is not None and view.target_reached

            def evals(rid: str) -> int:
                snap = app.engine.snapshot
                view = snap.views.get(rid) if snap is not None else None
                return len(view.evals) if view is not None else 0

            await until(pilot, lambda: reached("reach.r0") and evals("hang.r0") >= 2, "reach.r0 at its target, "
                        "hang.r0 hanging", patience_s=120)
            stop, kill = app.engine.act("stop", "reach.r0"), app.engine.act("kill", "hang.r0")
            await until(pilot, lambda: all(state(r) == e[0] for r, e in EXPECTED.items()), "every run ended",
                        patience_s=120)
            assert stop.result(timeout=0) is None and kill.result(timeout=0) is None
            # the header is repainted at most once a second: wait for the paint after the last state change
            await until(pilot, lambda: app.main.settled and all(
                rid in table(app)._rows and table(app)._rows[rid].cells["state"].split()[-1] == e[0]
                for rid, e in EXPECTED.items())
                and f"{COUNTS['failed']} failed" in str(app.main.query_one("#header-bar").render()),
                "every row and the header painted")
            snap = app.engine.snapshot
            rows = {rid: row.cells for rid, row in table(app)._rows.items()}
            header = str(app.main.query_one("#header-bar").render())
            details = {}
            for rid in EXPECTED:
                table(app).select(rid)
                await until(pilot, lambda rid=rid: rid in str(app.main.query_one(DetailPane).query_one(
                    "#detail-summary").render()), f"{rid}'s detail")
                details[rid] = str(app.main.query_one(DetailPane).query_one("#detail-summary").render())
            metrics = _metrics_text(session)
    finally:
        ctl.close(stop_runs=True)
        kill_groups({i.pgid for i in ctl.procs().values() if i.pgid})

    # the engine's one judgement is what this test caused
    for rid, (word, why, verdict, failed) in EXPECTED.items():
        status = snap.statuses[rid]
        assert (status.word, status.verdict.value, status.failed) == (word, verdict, failed), (rid, status)
        assert why in status.reason, (rid, status.reason)
        # the TUI: the state cell, no ETA for an ended run, the detail's state, reason and verdict
        assert rows[rid]["state"].split()[-1] == word and rows[rid]["eta"] == "–", (rid, rows[rid])
        assert f"state {word}" in details[rid] and why in details[rid] and f"target {verdict}" in details[rid]
    assert rows["reach.r0"]["state"] == "✓ stopped" and rows["hang.r0"]["state"] == "✗ killed"
    c = snap.counts
    assert {"runs": c.runs, "states": c.states, "reached": c.reached, "not_reached": c.not_reached,
            "no_target": c.no_target, "failed": c.failed} == COUNTS
    for text in ("6 runs", "1 done", "2 stopped", "1 killed", "2 crashed",
                 "target: 1 reached, 3 not reached, 2 no target", "4 failed"):
        assert text in header, header

    # the metrics endpoint, read by prometheus_client's own parser
    fams = {f.name: f for f in text_string_to_metric_families(metrics)}
    info = {s.labels["run"]: s.labels["perfwatch_run_state"] for s in fams["perfwatch_run_state"].samples
            if s.value == 1}
    assert info == {rid: e[0] for rid, e in EXPECTED.items()}
    assert {s.labels["state"]: s.value for s in fams["perfwatch_campaign_runs"].samples if s.value} == COUNTS["states"]
    assert {s.labels["verdict"]: s.value for s in fams["perfwatch_campaign_runs_target"].samples} == {
        "reached": 1, "not reached": 3, "no target": 2}
    assert [s.value for s in fams["perfwatch_campaign_runs_failed"].samples] == [4]
    assert not fams["perfwatch_run_eta_seconds"].samples  # no ended run has an ETA

    # report (json, table, html): every run, the live view's state and why, read from the LOGDIR afterwards
    rep = json.loads(_cli("report", str(logdir), "--format", "json"))
    runs = {r["run_id"]: r for r in rep["runs"]}
    assert set(runs) == set(EXPECTED)  # the run that logged nothing and the cancelled one too
    for rid, (word, _why, verdict, failed) in EXPECTED.items():
        r = runs[rid]
        assert (r["status"], r["target_verdict"], r["failed"]) == (word, verdict, failed), r
        assert (r["reason"] or "") == snap.statuses[rid].reason
    counts = rep["counts"]
    assert {k: counts[k] for k in COUNTS} == COUNTS
    table_text = _cli("report", str(logdir))
    assert "6 runs: 1 done, 2 stopped, 1 killed, 2 crashed; target: 1 reached, 3 not reached, 2 no target; " \
           "4 failed" in table_text
    for rid, (word, *_rest) in EXPECTED.items():
        line = next(ln for ln in table_text.splitlines() if ln.startswith(rid + " "))
        assert line.split()[2] == word, line
    from test_report_html import Page

    page = Page()
    page.feed(_cli("report", str(logdir), "--format", "html"))
    head, *body = page.tables["runs"]
    col = head.index("state")
    assert {r[0]: r[col] for r in body} == {rid: e[0] for rid, e in EXPECTED.items()}

    # headless: the campaign's final table (attach takes the finished campaign over and lists it)
    out = subprocess.run([sys.executable, "-m", "perfwatch", "attach", str(logdir), "--headless"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr  # runs failed
    for rid, (word, _why, verdict, _failed) in EXPECTED.items():
        line = next(ln for ln in out.stdout.splitlines() if ln.startswith(rid + " "))
        assert line.split()[1] == word and f" {verdict} " in line, line
    assert "1 done, 2 stopped, 1 killed, 2 crashed; target: 1 reached, 3 not reached, 2 no target; 4 failed" \
        in out.stdout

    # watched without control (`attach --once`, the TUI with --no-control): perfwatch.json's facts, read-only
    once = _cli("attach", str(logdir), "--once")
    for rid, (word, _why, verdict, _failed) in EXPECTED.items():
        line = next(ln for ln in once.splitlines() if re.search(rf"\] {re.escape(rid)} ", ln))
        assert line.split("]", 1)[1].split()[1] == word and f" {verdict} " in line, line
    assert "6 runs; NOT all succeeded" in once
    from perfwatch.core.engine import attach_session

    watch = PerfwatchApp(attach_session(logdir, control=False), theme="dark")
    async with watch.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: watch.main.settled and set(table(watch)._rows) == set(EXPECTED), "6 rows")
        shown = {rid: row.cells["state"].split()[-1] for rid, row in table(watch)._rows.items()}
        header2 = str(watch.main.query_one("#header-bar").render())
    assert shown == {rid: e[0] for rid, e in EXPECTED.items()}
    assert header2.split("  ", 2)[2] == header.split("  ", 2)[2]  # the same counts (host name aside)


def _seconds(text: str) -> int:
    """"2:25:53" (the TUI), "145m53s" or "58.2s" (headless) as whole seconds."""
    if text.endswith("s"):
        m = re.fullmatch(r"(?:(\d+)m)?([\d.]+)s", text)
        assert m, text
        return int(m.group(1) or 0) * 60 + int(float(m.group(2)))
    parts = [int(p) for p in text.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


async def test_a_live_runs_eta_is_one_number_in_the_tui_headless_and_metrics(mlperf_logs, tmp_path):
    """Half a real ResNet log (no run_stop yet): the ETA to its target and its ± are the same instant and
    spread in the TUI's cell, `--headless`' line and the metrics endpoint's gauges."""
    import signal

    from prometheus_client.parser import text_string_to_metric_families

    src = mlperf_logs / "v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_0.txt"
    lines = src.read_text(errors="replace").splitlines(keepends=True)
    fifth = [i for i, ln in enumerate(lines) if '"eval_accuracy"' in ln][4]
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "result_0.txt").write_text(written_now(lines[:fifth + 1]))

    app = attach_app(logs, theme="dark")
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: "result_0" in table(app)._rows and table(app)._rows["result_0"].cells["eta"]
                    != "–", "the ETA cell")
        cell = table(app)._rows["result_0"].cells["eta"]
        metrics = {f.name: f for f in text_string_to_metric_families(_metrics_text(app.session))}
    m = re.fullmatch(r"≈(\S+) ±(\S+)", cell)
    assert m, cell
    eta_s = metrics["perfwatch_run_eta_seconds"].samples[0].value
    pm_s = metrics["perfwatch_run_eta_plus_minus_seconds"].samples[0].value
    assert eta_s > 600 and pm_s > 60  # a converging run far from its target: nothing compared vacuously
    assert (_seconds(m.group(1)), _seconds(m.group(2))) == (int(eta_s), int(pm_s))

    out = tmp_path / "headless.out"
    with out.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "perfwatch", "attach", str(logs), "--headless"],
                                stdout=fh, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            if "ETA" in out.read_text():
                break
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    line = next(ln for ln in out.read_text().splitlines() if "ETA" in ln)
    h = re.search(r"ETA ≈(\S+) ±(\S+)", line)
    assert h, line
    assert (_seconds(h.group(1)), _seconds(h.group(2))) == (int(eta_s), int(pm_s))


def test_headless_live_lines_say_what_its_final_table_says(tmp_path):
    """A run's line is printed once when its process ends: only after its log was read to the end (a run
    that exits right after reaching its target is never printed as "not reached"; printed at once, about
    one try in three printed one of these runs so)."""
    from launch_helpers import ROOT, campaign_file

    body = f"""
        name: lines
        scheduler: {{max_parallel: 5}}
        defaults: {{repeat: 4, {TARGET}}}
        jobs:
          - {{name: ok, cmd: [python, {ROOT / FAKE}, --epochs, "3", --step, "0.02"]}}
          - {{name: crash, repeat: 1, cmd: [python, {ROOT / FAKE}, --mode, crash, --epochs, "4", --step, "0.02"]}}
    """
    out = subprocess.run([sys.executable, "-m", "perfwatch", "launch", str(campaign_file(tmp_path, body)),
                          "--headless", "--logdir", str(tmp_path / "logdir")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr  # the crash failed
    live = {}
    for ln in out.stdout.splitlines():
        m = re.match(r"\[\s*[\d.ms]+\] (\S+)\s+(done|crashed)\s.*target (reached|not reached)", ln)
        if m:
            live[m.group(1)] = (m.group(2), m.group(3))
    final = {}
    for ln in out.stdout.splitlines():
        m = re.match(r"(\S+\.r\d)\s+(\S+)\s+-?\d+\s+(reached|not reached)", ln)
        if m:
            final[m.group(1)] = (m.group(2), m.group(3))
    assert live == final == {**{f"ok.r{i}": ("done", "reached") for i in range(4)},
                             "crash.r0": ("crashed", "not reached")}, out.stdout
    assert "4 done, 1 crashed; target: 4 reached, 1 not reached; 1 failed" in out.stdout


# ---- the numbers of live runs: the endpoint scrapes what the TUI shows ---------------------------------
H100_SXM_BF16 = 989.5e12  # NVIDIA's H100 datasheet, SXM column: 1,979 TFLOP/s bf16 with sparsity, halved
GPU_RATE, GPU_FLOPS = 1000.0, 1e11  # what the GPU run logs: samples/s at every step, FLOPs per sample
GPT3 = "tests/data/mlperf-excerpts/v4.0/Google/results/cloud-tpu-v5p-1024-maxtext/gpt3/result_0.txt"


def _live_runs(root, mlperf_logs):
    """Three runs still training (no run_stop): a GPU run whose telemetry names no GPU (its MFU peak can only
    come from the live device sample), GPT-3 counting tokens, half a ResNet log converging to its target."""
    from launch_helpers import ROOT
    from ui_helpers import mllog

    logs = root / "live"
    gpu = logs / "gpu.r0"
    gpu.mkdir(parents=True)
    t0 = int(time.time() * 1000) - 60_000
    lines = [mllog("submission_benchmark", "mlp_regression", t0), mllog("global_batch_size", 32, t0),
             mllog("perfwatch_precision", "bf16", t0), mllog("perfwatch_flops_per_sample", GPU_FLOPS, t0),
             mllog("run_start", None, t0)]
    lines += [mllog("tracked_stats", {"throughput": GPU_RATE}, t0 + 1000 * k, step=k) for k in range(1, 41)]
    (gpu / "mllog.txt").write_text("".join(lines))
    with open(gpu / "telemetry.jsonl", "w") as fh:  # energy readings, but no GPU name: the peak is the live one's
        for k in range(41):
            fh.write(json.dumps({"time": t0 / 1000 + k, "run": "gpu.r0", "gpus": [
                {"index": 0, "uuid": "GPU-0", "power_w": 600.0, "energy_mj": 1_000_000 + 600_000 * k}]}) + "\n")
    (logs / "gpt3").mkdir()
    (logs / "gpt3" / "result_0.txt").write_text(written_now((ROOT / GPT3).read_text().splitlines(keepends=True)))  # no run_stop: still training
    src = mlperf_logs / "v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_0.txt"
    krai = src.read_text(errors="replace").splitlines(keepends=True)
    fifth = [i for i, ln in enumerate(krai) if '"eval_accuracy"' in ln][4]
    (logs / "resnet").mkdir()
    (logs / "resnet" / "result_0.txt").write_text(written_now(krai[:fifth + 1]))
    return logs


async def test_the_endpoint_scrapes_the_numbers_the_tui_shows_for_live_runs(mlperf_logs, tmp_path):
    """For runs still training, the real HTTP endpoint's throughput now and on average (samples/s and
    tokens/s), MFU (a GPU run's against the peak of the live device sample), energy, ETA, state and counts are
    the engine's snapshot values the TUI shows, parsed with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    from perfwatch.core.telemetry.fake import FakeGpu, FakeSampler
    from perfwatch.ui.format import energy_cell, fmt_mfu, fmt_per_s

    logs = _live_runs(tmp_path, mlperf_logs)
    runs = ("gpu.r0", "gpt3/result_0", "resnet/result_0")
    app = attach_app(logs, theme="dark", sampler=FakeSampler([FakeGpu()]), sampler_interval=0.2)

    def painted() -> bool:  # every number below is on screen, painted from the latest snapshot
        snap, rows = app.engine.snapshot, table(app)._rows
        if snap is None or not app.main.settled or not all(r in rows and r in snap.figures for r in runs):
            return False
        fig = snap.figures
        return (rows["gpu.r0"].cells["mfu"] != "–" and rows["gpu.r0"].cells["energy"] != "–"
                and rows["resnet/result_0"].cells["eta"] != "–"
                and all(rows[r].cells["tp_now"] == fmt_per_s(fig[r].tp_now, fig[r].unit) for r in runs))

    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, painted, "the live runs' numbers")
        for _ in range(100):  # a scrape between two equal snapshots: both front ends read one state of the runs
            before = app.engine.snapshot
            text = _metrics_text(app.session)
            after = app.engine.snapshot
            if (before.figures, before.energy, before.etas, before.statuses) == (
                    after.figures, after.energy, after.etas, after.statuses):
                break
            await pilot.pause(0.05)
        else:
            raise AssertionError("the runs' numbers never held still for one scrape")
        await until(pilot, painted, "the rows of that snapshot")
        snap = app.engine.snapshot
        assert (snap.figures, snap.energy, snap.etas) == (before.figures, before.energy, before.etas)
        cells = {rid: row.cells for rid, row in table(app)._rows.items()}
        header = str(app.main.query_one("#header-bar").render())
    fams = {f.name: f for f in text_string_to_metric_families(text)}

    def metric(name: str, rid: str) -> float | None:
        found = [s.value for s in fams[name].samples if s.labels["run"] == rid]
        assert len(found) <= 1, (name, rid, found)
        return found[0] if found else None

    exact = {"rel": 1e-13}  # the endpoint writes 15 significant digits
    for rid in runs:
        fig, cell = snap.figures[rid], cells[rid]
        now = metric("perfwatch_run_samples_per_second", rid)
        tokens = metric("perfwatch_run_tokens_per_second", rid)
        avg = metric("perfwatch_run_samples_per_second_mean", rid)
        mfu = metric("perfwatch_run_mfu_ratio", rid)
        assert now == pytest.approx(fig.samples_now, **exact) and avg == pytest.approx(fig.samples_avg, **exact)
        assert (tokens, fig.tokens_now) == (None, None) or tokens == pytest.approx(fig.tokens_now, **exact), rid
        assert cell["tp_now"] == fmt_per_s(tokens if fig.unit == "tokens" else now, fig.unit), (rid, cell)
        assert cell["mfu"] == fmt_mfu(mfu), (rid, cell)
        assert mfu == (pytest.approx(fig.mfu.value, **exact) if fig.mfu and fig.mfu.value is not None else None)
        states = [s.labels["perfwatch_run_state"] for s in fams["perfwatch_run_state"].samples
                  if s.labels["run"] == rid and s.value == 1]
        assert states == [snap.statuses[rid].word] == [cell["state"].split()[-1]] == ["running"], (rid, states)
    # by hand: the GPU run logs 1,000 samples/s of 1e11 FLOPs each on the fake H100 SXM (bf16)
    assert metric("perfwatch_run_samples_per_second", "gpu.r0") == GPU_RATE
    assert metric("perfwatch_run_mfu_ratio", "gpu.r0") == pytest.approx(GPU_RATE * GPU_FLOPS / H100_SXM_BF16)
    assert "H100 SXM" in snap.figures["gpu.r0"].mfu.peak_says and "live GPU" in snap.figures["gpu.r0"].mfu.peak_says
    # GPT-3 counts tokens: the TUI shows tokens/s, the endpoint both units (a sample is a 2,048-token sequence)
    tok = metric("perfwatch_run_tokens_per_second", "gpt3/result_0")
    assert snap.figures["gpt3/result_0"].unit == "tokens" and 170_000 < tok < 180_000  # ~176k tokens/s
    assert metric("perfwatch_run_samples_per_second", "gpt3/result_0") == pytest.approx(tok / 2048)
    # energy: the TUI's energy-to-train (so far) and the whole run's, from the engine
    energy = snap.energy["gpu.r0"]
    ett = metric("perfwatch_run_energy_to_train_joules", "gpu.r0")
    assert ett == pytest.approx(energy.to_train.energy.joules, **exact) and cells["gpu.r0"]["energy"] == energy_cell(
        energy)
    assert metric("perfwatch_run_energy_joules", "gpu.r0") == pytest.approx(energy.whole.joules, **exact)
    assert metric("perfwatch_run_energy_joules", "gpu.r0") == pytest.approx(40 * 600.0)  # by hand: 40 s at 600 W
    # the ETA of the converging ResNet run: the TUI's cell, to the second
    m = re.fullmatch(r"≈(\S+) ±(\S+)", cells["resnet/result_0"]["eta"])
    assert m, cells["resnet/result_0"]["eta"]
    eta_s = metric("perfwatch_run_eta_seconds", "resnet/result_0")
    pm_s = metric("perfwatch_run_eta_plus_minus_seconds", "resnet/result_0")
    assert (_seconds(m.group(1)), _seconds(m.group(2))) == (int(eta_s), int(pm_s))
    # the counts in the header
    c = snap.counts
    assert {s.labels["state"]: s.value for s in fams["perfwatch_campaign_runs"].samples if s.value} == {"running": 3}
    assert c.states == {"running": 3} and "3 runs  3 running" in header
