"""R3 and detach: perfwatch dies (or steps away) mid-campaign, runs go on, `attach` takes them back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from launch_helpers import FAKE, ROOT, campaign_file, group_members, kill_groups, wait_for

from perfwatch.core.control.controller import ClientController, RunState
from perfwatch.core.control.process import same_process
from perfwatch.core.control.scheduler import Scheduler
from perfwatch.core.engine import attach_session


def registry(logdir: Path) -> dict:
    return json.loads((logdir / "perfwatch.json").read_text())


def pgids_of(logdir: Path) -> set[int]:
    try:
        return {r["pgid"] for r in registry(logdir)["runs"] if r.get("pgid")}
    except (OSError, ValueError):
        return set()


class RegistryReader(threading.Thread):
    """Reads perfwatch.json as fast as it can; counts every read that does not parse."""

    def __init__(self, logdir: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.reads, self.torn = logdir / "perfwatch.json", 0, 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.002):
            try:
                text = self.path.read_text()
            except OSError:
                continue
            self.reads += 1
            try:
                json.loads(text)
            except ValueError:
                self.torn += 1


def perfwatch(*args: str, out: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as fh:
        return subprocess.Popen([sys.executable, "-m", "perfwatch", *args], cwd=ROOT, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)


def test_sigkill_perfwatch_mid_campaign_runs_go_on_and_attach_finishes_it(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, f"""
        scheduler: {{max_parallel: 2}}
        defaults: {{target: {{value: 0.9}}}}
        jobs:
          - {{name: job, repeat: 3, cmd: [python, {FAKE}, --epochs, 30, --step, 0.1]}}
        """)
    logdir = tmp_path / "logdir"
    pw = perfwatch("launch", str(path), "--headless", "--logdir", str(logdir), out=tmp_path / "launch.out")
    reader = RegistryReader(logdir)
    reader.start()
    try:
        assert wait_for(lambda: (logdir / "perfwatch.json").exists() and
                        sum(r["state"] == "running" for r in registry(logdir)["runs"]) == 2)
        os.killpg(pw.pid, signal.SIGKILL)  # perfwatch (and only perfwatch: runs are in their own groups)
        pw.wait()
        before = {r["run_id"]: r for r in registry(logdir)["runs"]}
        live = [r for r in before.values() if r["state"] == "running"]
        assert len(live) == 2 and before["job.r2"]["state"] == "queued"
        for r in live:  # still the processes perfwatch started
            assert same_process(r["pid"], r["create_time"])
        for r in live:  # they finish on their own, logs complete, exit status recorded without perfwatch
            exit_file = logdir / r["run_id"] / "exit.json"
            assert wait_for(exit_file.exists)
            assert b'"key": "run_stop"' in (logdir / r["run_id"] / "mllog.txt").read_bytes()
            assert json.loads((logdir / r["run_id"] / "exit.json").read_text())["exit_code"] == 0
        assert registry(logdir)["runs"][2]["state"] == "queued"  # nobody owned the campaign meanwhile
        at = perfwatch("attach", str(logdir), "--headless", out=tmp_path / "attach.out")
        assert wait_for(lambda: at.poll() is not None, timeout=60)
        text = (tmp_path / "attach.out").read_text()
        assert at.returncode == 0, text
        for rid in ("job.r0", "job.r1", "job.r2"):
            row = next(line.split() for line in text.splitlines() if line.startswith(rid + " "))
            assert row[1:3] == ["done", "0"], text
        assert "all runs succeeded" in text
    finally:
        reader.halt.set()
        reader.join()
        kill_groups(pgids_of(logdir) | {pw.pid})
    assert reader.reads > 0 and reader.torn == 0


def test_attach_readopts_live_runs_and_can_stop_them(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, f"""
        defaults: {{grace: 1s}}
        jobs:
          - {{name: long, repeat: 2, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    logdir = tmp_path / "logdir"
    pw = perfwatch("launch", str(path), "--headless", "--logdir", str(logdir), out=tmp_path / "launch.out")
    ctl = None
    try:
        assert wait_for(lambda: (logdir / "perfwatch.json").exists() and
                        all(r["state"] == "running" for r in registry(logdir)["runs"]))
        os.killpg(pw.pid, signal.SIGKILL)
        pw.wait()
        pids = {r["run_id"]: r["pid"] for r in registry(logdir)["runs"]}
        session = attach_session(logdir)
        ctl = session.controller
        assert isinstance(ctl, Scheduler), ctl  # nobody owned it: this attach takes over
        procs = ctl.procs()
        assert {rid: (p.state, p.pid) for rid, p in procs.items()} == {
            rid: (RunState.RUNNING, pid) for rid, pid in pids.items()}, (procs, registry(logdir)["runs"])
        ctl.pause("long.r0")
        assert wait_for(lambda: psutil.Process(pids["long.r0"]).status() == psutil.STATUS_STOPPED), (
            ctl.procs()["long.r0"], psutil.Process(pids["long.r0"]).status())  # what the scheduler made of it
        ctl.stop_all()
        assert wait_for(lambda: ctl.done, tick=ctl.poll), ctl.procs()
        assert {p.state for p in ctl.procs().values()} == {RunState.STOPPED}, ctl.procs()
        assert group_members(set(pids.values())) == [], ctl.procs()
    finally:
        if ctl is not None:
            ctl.close(stop_runs=False)  # its threads never outlive the test, pass or fail
        kill_groups(pgids_of(logdir) | {pw.pid})


def test_detach_keeps_running_and_a_client_attach_controls_it(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, f"""
        scheduler: {{max_parallel: 1}}
        defaults: {{grace: 1s}}
        jobs:
          - {{name: quick, cmd: [python, {FAKE}, --epochs, 2]}}
          - {{name: long, repeat: 2, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    logdir = tmp_path / "logdir"
    out = subprocess.run([sys.executable, "-m", "perfwatch", "launch", str(path), "--detach", "--logdir",
                          str(logdir)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"perfwatch attach {logdir}" in out.stdout
    daemon_pid = int(out.stdout.split("scheduler pid ")[1].split(")")[0])
    try:
        # the background scheduler starts queued runs while no UI is attached
        assert wait_for(lambda: registry(logdir)["runs"][0]["state"] == "succeeded" and
                        registry(logdir)["runs"][1]["state"] == "running")
        session = attach_session(logdir)
        ctl = session.controller
        assert isinstance(ctl, ClientController)  # the owner is alive: control goes through requests
        assert ctl.procs()["long.r1"].state is RunState.QUEUED
        ctl.start_now("long.r1")
        assert wait_for(lambda: ctl.procs()["long.r1"].state is RunState.RUNNING, tick=ctl.poll)
        ctl.stop_all()
        assert wait_for(lambda: all(p.state.terminal for p in ctl.procs().values()), tick=ctl.poll)
        assert [ctl.procs()[r].state for r in ("quick.r0", "long.r0", "long.r1")] == [
            RunState.SUCCEEDED, RunState.STOPPED, RunState.STOPPED]
        assert wait_for(lambda: not psutil.pid_exists(daemon_pid) or
                        psutil.Process(daemon_pid).status() == psutil.STATUS_ZOMBIE)
        assert "NOT all runs succeeded" in (logdir / "scheduler.out").read_text()
    finally:
        kill_groups(pgids_of(logdir) | {daemon_pid})


def test_attach_headless_on_plain_mlperf_logs_reports_and_never_controls(
        mlperf_logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfwatch.cli import main

    rc = main(["attach", str(mlperf_logs / "v2.1" / "Krai"), "--headless"])
    out = capsys.readouterr().out
    assert "(logs only, following" in out  # every run has run_stop: it returns at once
    assert "resnet/result_1 aborted   not reached" in out and "resnet/result_0 done      reached" in out
    assert rc == 1  # result_1 was aborted: not every run succeeded
    assert not (mlperf_logs / "v2.1" / "Krai" / "perfwatch.json").exists()


def writer(log: Path, gate: Path, *extra: str) -> subprocess.Popen[bytes]:
    """A real process appending :::MLLOG lines to `log`; it logs run_stop only once `gate` exists."""
    env = {**os.environ, "PERFWATCH_MLLOG": str(log)}
    return subprocess.Popen([sys.executable, FAKE, "--epochs", "3", "--step", "0.05", "--gate", str(gate), *extra],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, start_new_session=True)


def test_headless_attach_follows_plain_logs_being_written_until_run_stop(tmp_path: Path) -> None:
    logs, gate, out = tmp_path / "logs", tmp_path / "gate", tmp_path / "attach.out"
    logs.mkdir()
    at = perfwatch("attach", str(logs), "--headless", out=out)  # before the cluster job writes anything
    w: subprocess.Popen[bytes] | None = None
    try:
        assert wait_for(lambda: "no runs yet, waiting for logs" in out.read_text())
        w = writer(logs / "result_0.txt", gate)
        # eval results are printed as they are logged, and with no run_stop yet it keeps following
        assert wait_for(lambda: "0.99  epoch 3" in out.read_text(), timeout=60), out.read_text()
        assert at.poll() is None
        gate.touch()  # the writer logs run_stop: attach reports and exits by itself
        assert wait_for(lambda: at.poll() is not None, timeout=60), out.read_text()
        text = out.read_text()
        assert at.returncode == 0, text
        assert "result_0                 found" in text and "result_0                 eval      0.99  epoch 3" in text
        assert "result_0                 done      no target    eval 0.99  time-to-train" in text
        assert text.rstrip().endswith("1 runs; all succeeded")
    finally:
        kill_groups({at.pid} | ({w.pid} if w else set()))


def test_headless_attach_once_reads_once_and_sigterm_ends_following(tmp_path: Path) -> None:
    logs, gate = tmp_path / "logs", tmp_path / "gate"
    logs.mkdir()
    w = writer(logs / "result_0.txt", gate)
    try:
        assert wait_for(lambda: (logs / "result_0.txt").exists() and
                        (logs / "result_0.txt").read_text().count("eval_accuracy") == 3)
        once = subprocess.run([sys.executable, "-m", "perfwatch", "attach", str(logs), "--once"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert once.returncode == 1, once.stdout  # one pass; the run has not ended, so not a success
        assert "one pass" in once.stdout and "result_0                 running   no target" in once.stdout
        assert "1 runs; NOT all succeeded" in once.stdout
        out = tmp_path / "attach.out"
        at = perfwatch("attach", str(logs), "--headless", out=out)
        try:
            assert wait_for(lambda: "result_0                 running   eval 0.99" in out.read_text())
            assert at.poll() is None
            os.kill(at.pid, signal.SIGTERM)
            assert wait_for(lambda: at.poll() is not None), out.read_text()
            text = out.read_text()
            assert at.returncode == 130, text
            assert "interrupted (SIGTERM)" in text and "1 runs; NOT all succeeded" in text
        finally:
            kill_groups({at.pid})
    finally:
        kill_groups({w.pid})
