"""Starting runs: a start error fails that run (never the scheduler), and each start is on disk before
the next one, so no perfwatch crash can forget a live process or start a run twice."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import FAKE, ROOT, campaign_file, kill_groups, scheduler, wait_for

from perfwatch.core.control import process
from perfwatch.core.control.controller import RunState
from perfwatch.core.control.scheduler import Scheduler
from perfwatch.core.engine import attach_session


def on_disk(logdir: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in json.loads((logdir / "perfwatch.json").read_text())["runs"]}


def test_a_start_error_fails_that_run_and_the_next_one_starts(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        scheduler: {{max_parallel: 2}}
        jobs:
          - {{name: a, repeat: 2, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    owned.append(s)
    bad = s.runs["a.r0"]  # as an older perfwatch.json could hold it: a NUL byte no process can take
    bad.spec = dataclasses.replace(bad.spec, argv=(*bad.spec.argv, "x\0y"))
    s.poll()
    procs = s.procs()
    assert procs["a.r0"].state is RunState.FAILED and "cannot start" in (procs["a.r0"].reason or "")
    assert "null byte" in (procs["a.r0"].reason or "")
    assert procs["a.r1"].state is RunState.RUNNING
    assert on_disk(s.logdir)["a.r0"]["state"] == "failed"
    s.stop_all()
    assert wait_for(lambda: s.done, tick=s.poll)


def test_each_start_is_recorded_before_the_next_run_starts(tmp_path: Path, owned: list[Scheduler],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    s = scheduler(tmp_path, f"""
        scheduler: {{max_parallel: 3}}
        jobs:
          - {{name: a, repeat: 3, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    owned.append(s)
    seen: list[dict[str, dict]] = []
    real = process.start

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(on_disk(s.logdir))  # what a perfwatch dying right now would leave behind
        return real(*args, **kwargs)

    monkeypatch.setattr(process, "start", spy)
    s.poll()
    assert len(seen) == 3
    for i, disk in enumerate(seen):
        assert disk[f"a.r{i}"]["state"] == "starting"  # never "queued" while its process may exist
        for j in range(i):
            assert disk[f"a.r{j}"]["state"] == "running" and disk[f"a.r{j}"]["pid"]
    s.stop_all()
    assert wait_for(lambda: s.done, tick=s.poll)


def test_a_run_left_starting_is_adopted_or_never_started_again(tmp_path: Path) -> None:
    """perfwatch died after writing `starting` but before the pid: attach finds a live supervisor by its
    exit-file argument and adopts it; one it cannot find (and no exit.json) is `unknown`, never re-run."""
    path = campaign_file(tmp_path, f"""
        scheduler: {{max_parallel: 2}}
        defaults: {{grace: 1s}}
        jobs:
          - {{name: a, repeat: 2, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    logdir = tmp_path / "logdir"
    pw = subprocess.Popen([sys.executable, "-m", "perfwatch", "launch", str(path), "--headless", "--logdir",
                           str(logdir)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
    pgids: set[int] = set()
    try:
        assert wait_for(lambda: (logdir / "perfwatch.json").exists() and
                        all(r["state"] == "running" for r in on_disk(logdir).values()))
        os.killpg(pw.pid, signal.SIGKILL)
        pw.wait()
        data = json.loads((logdir / "perfwatch.json").read_text())
        pgids = {r["pgid"] for r in data["runs"]}
        live_pid = data["runs"][0]["pid"]
        os.killpg(data["runs"][1]["pgid"], signal.SIGKILL)  # a.r1 dies without writing exit.json
        assert wait_for(lambda: process.find_supervisor(logdir / "a.r1") is None)
        for rec in data["runs"]:  # as a perfwatch killed before recording either pid leaves it
            rec.update(state="starting", pid=None, pgid=None, create_time=None)
        (logdir / "perfwatch.json").write_text(json.dumps(data))
        session = attach_session(logdir)
        ctl = session.controller
        assert isinstance(ctl, Scheduler)
        procs = ctl.procs()
        assert procs["a.r0"].state is RunState.RUNNING and procs["a.r0"].pid == live_pid
        assert procs["a.r1"].state is RunState.UNKNOWN and "not started again" in (procs["a.r1"].reason or "")
        ctl.poll()
        assert ctl.procs()["a.r1"].pid is None  # never started twice
        ctl.stop_all()
        assert wait_for(lambda: ctl.done, tick=ctl.poll)
        assert ctl.procs()["a.r0"].state is RunState.STOPPED
        ctl.close(stop_runs=False)
    finally:
        kill_groups(pgids | {pw.pid})
