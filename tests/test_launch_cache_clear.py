"""`cache_clear_cmd`: run by the runner before every attempt, in the run's process group (real processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_helpers import (
    FAKE,
    ROOT,
    campaign_file,
    group_members,
    scheduler,
    wait_for,
)

from perfwatch.cli import main
from perfwatch.core.control.controller import RunState
from perfwatch.core.control.scheduler import Scheduler

CLEAR = str(ROOT / "tests/workloads_fake/clear_cache.py")




def marks(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_record(s: Scheduler, run_id: str) -> dict:
    data = json.loads((s.logdir / "perfwatch.json").read_text())
    return next(r for r in data["runs"] if r["run_id"] == run_id)


def test_cache_clear_runs_before_each_attempt_in_the_runs_group(tmp_path: Path, owned: list[Scheduler]) -> None:
    marker = tmp_path / "marker.jsonl"
    s = scheduler(tmp_path, f"""
        cache_clear_cmd: [python, {CLEAR}, --marker, {marker}]
        jobs:
          - {{name: ok, cmd: [python, {FAKE}, --epochs, 2]}}
        """)
    owned.append(s)
    assert wait_for(lambda: s.done, tick=s.poll)
    info = s.procs()["ok.r0"]
    assert info.state is RunState.SUCCEEDED and info.exit_code == 0
    [mark] = marks(marker)
    assert mark["pgid"] == info.pgid and mark["run_id"] == "ok.r0"  # the run's own group and environment
    out = (s.logdir / "ok.r0" / "output.log").read_text()
    # its output is in the run's output.log, and it ran before the workload started
    assert out.index("perfwatch: cache_clear_cmd:") < out.index("fake cache clear") < out.index("fake workload")
    assert "perfwatch: cache_clear_cmd exit 0" in out
    for rec in (run_record(s, "ok.r0")["cache_clear"],
                json.loads((s.logdir / "ok.r0" / "exit.json").read_text())["cache_clear"]):
        assert rec["ok"] is True and rec["exit_code"] == 0 and rec["argv"][1:] == [CLEAR, "--marker", str(marker)]
    s.restart("ok.r0")  # a new attempt clears the caches again
    assert wait_for(lambda: s.done, tick=s.poll)
    assert s.procs()["ok.r0"].state is RunState.SUCCEEDED
    first, second = marks(marker)
    assert second["pgid"] == s.procs()["ok.r0"].pgid != first["pgid"]
    assert "fake cache clear" in (s.logdir / "ok.r0" / ".attempt-1.output.log").read_text()
    assert "fake cache clear" in (s.logdir / "ok.r0" / "output.log").read_text()


def test_failing_cache_clear_fails_the_run_and_never_starts_the_workload(
        tmp_path: Path, owned: list[Scheduler]) -> None:
    marker = tmp_path / "marker.jsonl"
    s = scheduler(tmp_path, f"""
        scheduler: {{max_parallel: 2}}
        defaults: {{cache_clear_cmd: [python, {CLEAR}, --marker, {marker}, --exit, 3]}}
        jobs:
          - {{name: cleared, cmd: [python, {FAKE}, --epochs, 2]}}
          - {{name: plain, cmd: [python, {FAKE}, --epochs, 2], cache_clear_cmd: null}}
        """)
    owned.append(s)
    assert wait_for(lambda: s.done, tick=s.poll)
    bad, plain = s.procs()["cleared.r0"], s.procs()["plain.r0"]
    assert bad.state is RunState.FAILED and bad.exit_code == 3
    assert bad.reason == "cache_clear_cmd failed: exit 3; workload not started"
    assert not (s.logdir / "cleared.r0" / "mllog.txt").exists()
    out = (s.logdir / "cleared.r0" / "output.log").read_text()
    assert "fake cache clear" in out and "fake workload" not in out
    assert "fake cache clear: dropped caches (exit 3)" in bad.last_output  # what the UI and headless show
    rec = run_record(s, "cleared.r0")
    assert rec["cache_clear"]["ok"] is False and rec["cache_clear"]["exit_code"] == 3 and rec["state"] == "failed"
    assert plain.state is RunState.SUCCEEDED and len(marks(marker)) == 1  # switched off for that job


def test_hanging_cache_clear_times_out_and_leaves_nothing(tmp_path: Path, owned: list[Scheduler]) -> None:
    marker = tmp_path / "marker.jsonl"
    s = scheduler(tmp_path, f"""
        jobs:
          - name: slow
            cmd: [python, {FAKE}, --epochs, 2]
            cache_clear_cmd: [python, {CLEAR}, --marker, {marker}, --sleep, 120]
            cache_clear_timeout: 1s
        """)
    owned.append(s)
    assert wait_for(lambda: s.procs()["slow.r0"].pgid is not None, tick=s.poll)
    pgid = s.procs()["slow.r0"].pgid
    assert pgid is not None
    assert wait_for(lambda: s.done, tick=s.poll)
    info = s.procs()["slow.r0"]
    assert info.state is RunState.FAILED and info.exit_code == 124
    assert info.reason == "cache_clear_cmd failed: timed out after 1s; workload not started"
    assert run_record(s, "slow.r0")["cache_clear"]["timed_out"] is True
    assert not (s.logdir / "slow.r0" / "mllog.txt").exists()
    assert wait_for(lambda: group_members({pgid}) == [])


def test_stop_during_cache_clear_starts_nothing(tmp_path: Path, owned: list[Scheduler]) -> None:
    marker = tmp_path / "marker.jsonl"
    s = scheduler(tmp_path, f"""
        defaults: {{grace: 5s}}
        jobs:
          - name: slow
            cmd: [python, {FAKE}, --epochs, 2]
            cache_clear_cmd: [python, {CLEAR}, --marker, {marker}, --sleep, 120]
        """)
    owned.append(s)
    assert wait_for(lambda: marks(marker) != [], tick=s.poll)
    s.stop("slow.r0")
    assert wait_for(lambda: s.done, tick=s.poll)
    info = s.procs()["slow.r0"]
    assert info.state is RunState.STOPPED and "SIGKILL" not in (info.reason or "")  # no escalation needed
    assert not (s.logdir / "slow.r0" / "mllog.txt").exists()
    assert "fake workload" not in (s.logdir / "slow.r0" / "output.log").read_text()


def test_headless_launch_reports_the_cache_clear_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    path = campaign_file(tmp_path, f"""
        cache_clear_cmd: [python, {CLEAR}, --marker, {tmp_path / "marker.jsonl"}, --exit, 1]
        jobs:
          - {{name: mlp, cmd: [python, {FAKE}, --epochs, 2]}}
        """)
    assert main(["launch", str(path), "--headless", "--logdir", str(tmp_path / "logdir")]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("mlp.r0 ") and "  1  " in line)
    assert "failed" in row and "cache_clear_cmd failed: exit 1; workload not started" in row
    assert "| fake cache clear: dropped caches (exit 1)" in out
    assert "NOT all runs succeeded" in out
    # watching the finished campaign without taking it over shows the same verdict
    assert main(["attach", str(tmp_path / "logdir"), "--headless", "--no-control"]) == 1
    out = capsys.readouterr().out
    assert "(watch only)" in out and "cache_clear_cmd failed: exit 1; workload not started" in out
