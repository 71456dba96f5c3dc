"""Stop and kill reach a run's whole process tree: a grandchild that double-forks, calls setsid() or
setpgid() and ignores SIGTERM is gone when the run ends (real processes, no fakes)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
from launch_helpers import kill_groups, scheduler, wait_for

from perfwatch.core.control.controller import RunState
from perfwatch.core.control.scheduler import Scheduler
from perfwatch.core.engine import attach_session

ESCAPER = "tests/workloads_fake/escaper.py"


def grandchild(pidfile: Path) -> psutil.Process:
    assert wait_for(pidfile.exists), "the grandchild never started"
    proc = psutil.Process(int(pidfile.read_text()))
    return proc


def gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize(("how", "flag"), [("stop", ""), ("kill", ""), ("stop", "--setpgid"), ("exit", "")])
def test_escaped_grandchild_is_ended_with_its_run(tmp_path: Path, owned: list[Scheduler], how: str,
                                                  flag: str) -> None:
    pidfile = tmp_path / "grandchild.pid"
    extra = f", {flag}" if flag else ""
    extra += ", --exit-after, 1" if how == "exit" else ""
    s = scheduler(tmp_path, f"""
        defaults: {{grace: 1s}}
        jobs:
          - {{name: e, cmd: [python, {ESCAPER}, --pidfile, {pidfile}{extra}]}}
        """)
    owned.append(s)
    s.poll()
    gc = grandchild(pidfile)
    try:
        info = s.procs()["e.r0"]
        assert os.getpgid(gc.pid) != info.pgid  # it really left the run's process group
        assert gc.ppid() != 1  # the supervisor keeps orphans below it (child subreaper), not init
        if how == "stop":
            s.stop("e.r0")
        elif how == "kill":
            s.kill("e.r0")
        assert wait_for(lambda: s.done, tick=s.poll)
        assert wait_for(lambda: gone(gc), timeout=10), f"grandchild {gc.pid} survived {how}"
        expected = {"stop": RunState.STOPPED, "kill": RunState.KILLED, "exit": RunState.SUCCEEDED}[how]
        assert s.procs()["e.r0"].state is expected
    finally:
        if not gone(gc):
            gc.kill()


def test_a_taken_over_run_is_stopped_with_its_escaped_grandchild(tmp_path: Path, owned: list[Scheduler]) -> None:
    pidfile = tmp_path / "grandchild.pid"
    s = scheduler(tmp_path, f"""
        defaults: {{grace: 1s}}
        jobs:
          - {{name: e, cmd: [python, {ESCAPER}, --pidfile, {pidfile}]}}
        """)
    s.poll()
    gc = grandchild(pidfile)
    pgid = s.procs()["e.r0"].pgid
    try:
        assert wait_for(lambda: gc.pid in (s.runs["e.r0"].proc.known if s.runs["e.r0"].proc else {}), tick=s.poll)
        s.poll()
        s.close(stop_runs=False)  # perfwatch goes away; the run and its grandchild live on
        session = attach_session(s.logdir)
        ctl = session.controller
        assert isinstance(ctl, Scheduler)
        owned.append(ctl)
        ctl.pause("e.r0")  # SIGSTOP reaches the escaped grandchild too
        assert wait_for(lambda: gc.status() == psutil.STATUS_STOPPED)
        ctl.stop("e.r0")
        assert wait_for(lambda: ctl.done, tick=ctl.poll)
        assert wait_for(lambda: gone(gc), timeout=10)
    finally:
        kill_groups({pgid} if pgid else set())
        if not gone(gc):
            gc.send_signal(signal.SIGKILL)


def test_a_workload_killed_by_a_real_time_signal_is_recorded_by_number(tmp_path: Path, owned: list[Scheduler]) -> None:
    """Signal 40 (SIGRTMIN+6 on Linux) has no name in Python's enum: the supervisor still writes exit.json
    and the run is `killed` by that signal, not `failed 1` with no exit record."""
    import json

    s = scheduler(tmp_path, """
        jobs:
          - {name: rt, cmd: [python, -c, "import os; os.kill(os.getpid(), 40)"]}
        """)
    owned.append(s)
    assert wait_for(lambda: s.done, tick=s.poll)
    info = s.procs()["rt.r0"]
    record = json.loads((info.folder / "exit.json").read_text())
    rt = 40 - signal.SIGRTMIN
    assert record["signal"] == f"SIGRTMIN+{rt}" and record["signal_number"] == 40, record
    assert info.state is RunState.KILLED and info.exit_code == -40 and info.reason == f"killed by SIGRTMIN+{rt}"
