"""Scheduler policy with real processes: max_parallel, queue control, timeouts, exit at target, devices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_helpers import (
    FAKE,
    ROOT,
    campaign_file,
    group_members,
    kill_groups,
    scheduler,
    wait_for,
)

from perfwatch.cli import main
from perfwatch.core.control.controller import RunState
from perfwatch.core.control.scheduler import Scheduler


def test_max_parallel_queue_start_now_and_cancel(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        scheduler: {{max_parallel: 1}}
        jobs:
          - {{name: a, repeat: 4, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    owned.append(s)
    s.poll()
    st = {rid: i.state for rid, i in s.procs().items()}
    assert st == {"a.r0": RunState.RUNNING, "a.r1": RunState.QUEUED, "a.r2": RunState.QUEUED,
                  "a.r3": RunState.QUEUED}
    assert s.can("start_now", "a.r2") and not s.can("start_now", "a.r0")
    s.start_now("a.r2")  # the user overrides max_parallel for this one
    s.stop("a.r3")  # cancel a queued run: nothing is started for it
    s.poll()
    st = {rid: i.state for rid, i in s.procs().items()}
    assert st["a.r2"] is RunState.RUNNING and st["a.r1"] is RunState.QUEUED
    assert st["a.r3"] is RunState.STOPPED and s.procs()["a.r3"].pid is None
    s.stop_all()
    assert wait_for(lambda: s.done, tick=s.poll)
    assert s.procs()["a.r1"].state is RunState.STOPPED and s.procs()["a.r1"].pid is None


def test_timeout_stops_the_run(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        jobs:
          - {{name: slow, timeout: 1s, grace: 1s, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    owned.append(s)
    assert wait_for(lambda: s.done, tick=s.poll)
    info = s.procs()["slow.r0"]
    assert info.state is RunState.TIMEOUT and "timeout after 1s" in (info.reason or "")
    assert info.pgid is not None and group_members({info.pgid}) == []


def test_a_cpu_run_gets_no_gpu_and_the_pci_device_order(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        jobs:
          - {{name: cpu, cmd: [python, {FAKE}, --epochs, 1]}}
        """)
    owned.append(s)
    assert wait_for(lambda: s.done, tick=s.poll)
    assert s.procs()["cpu.r0"].state is RunState.SUCCEEDED
    env = json.loads((s.logdir / "perfwatch.json").read_text())["runs"][0]["env_delta"]
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["PERFWATCH_RUN_ID"] == "cpu.r0"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["PERFWATCH_MLLOG"] == str(s.logdir / "cpu.r0" / "mllog.txt")


def test_headless_exit_at_target_stops_a_run_that_does_not_stop(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    path = campaign_file(tmp_path, f"""
        defaults: {{target: {{value: 0.9}}, exit_at_target: true, grace: 2s}}
        jobs:
          - {{name: forever, cmd: [python, {FAKE}, --mode, no_stop, --epochs, 3]}}
          - {{name: ok, cmd: [python, {FAKE}, --epochs, 3]}}
        """)
    logdir = tmp_path / "logdir"
    try:
        rc = main(["launch", str(path), "--headless", "--logdir", str(logdir)])
    finally:
        data = json.loads((logdir / "perfwatch.json").read_text())
        kill_groups({r["pgid"] for r in data["runs"] if r.get("pgid")})
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("forever.r0", "ok.r0 "))}
    assert rows["forever.r0"][1:4] == ["done", "-15", "reached"], out
    assert "target reached; stopped by perfwatch" in out
    assert rows["ok.r0"][1:4] == ["done", "0", "reached"], out
    assert "all runs succeeded" in out


def test_headless_exit_status_is_1_when_a_run_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    path = campaign_file(tmp_path, f"""
        jobs:
          - {{name: crash, cmd: [python, {FAKE}, --mode, crash]}}
        """)
    rc = main(["launch", str(path), "--headless", "--logdir", str(tmp_path / "logdir")])
    out = capsys.readouterr().out
    assert rc == 1
    assert "crash.r0" in out and "failed" in out and "| RuntimeError: fake CUDA error" in out
    assert "NOT all runs succeeded" in out


def test_owner_records_each_runs_telemetry(tmp_path: Path, owned: list[Scheduler]) -> None:
    """The campaign owner appends the run's process-tree CPU/RSS (and GPUs, N/A here) to telemetry.jsonl."""
    from perfwatch.core.telemetry.jsonl import read_telemetry

    s = scheduler(tmp_path, f"""
        jobs:
          - {{name: a, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    owned.append(s)
    s.record_telemetry(interval=0.1)
    s.poll()
    folder = s.logdir / "a.r0"
    assert wait_for(lambda: len(read_telemetry(folder)) >= 3, tick=s.poll)
    rec = read_telemetry(folder)[-1]
    assert rec["run"] == "a.r0" and rec["rss"] > 0 and rec["nprocs"] >= 1
    assert json.dumps(rec)  # plain JSON
    s.stop_all()
    assert wait_for(lambda: s.done, tick=s.poll)
