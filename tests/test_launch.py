"""Process control with real processes: crash, hang, SIGTERM-ignoring runs, pause/resume, restart (R4)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from launch_helpers import FAKE, group_members, run_pgids, scheduler, wait_for

from perfwatch.core.control import process as launch
from perfwatch.core.control.controller import RunState
from perfwatch.core.control.scheduler import Scheduler


def states(s: Scheduler) -> dict[str, RunState]:
    return {rid: i.state for rid, i in s.procs().items()}


def test_crash_hang_and_sigterm_ignoring_runs(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        scheduler: {{max_parallel: 3}}
        defaults: {{grace: 1s, stall_after: 1s}}
        jobs:
          - {{name: crash, cmd: [python, {FAKE}, --mode, crash]}}
          - {{name: hang, cmd: [python, {FAKE}, --mode, hang]}}
          - {{name: stubborn, cmd: [python, {FAKE}, --mode, ignore_term]}}
        """)
    owned.append(s)
    assert wait_for(lambda: states(s)["crash.r0"].terminal and states(s)["hang.r0"] is RunState.STALLED
                    and states(s)["stubborn.r0"] is RunState.STALLED, tick=s.poll)
    crash = s.procs()["crash.r0"]
    assert crash.state is RunState.FAILED and crash.exit_code == 3 and crash.reason == "exit 3"
    assert "RuntimeError: fake CUDA error" in crash.last_output
    hang = s.procs()["hang.r0"]
    assert hang.stalled and "no output for 1s" in (hang.reason or "")
    pgids = run_pgids(s)
    s.stop("hang.r0")
    s.stop("stubborn.r0")
    assert wait_for(lambda: s.done, tick=s.poll)
    hang, stubborn = s.procs()["hang.r0"], s.procs()["stubborn.r0"]
    assert hang.state is RunState.STOPPED and hang.exit_code == -signal.SIGTERM
    assert stubborn.state is RunState.STOPPED and stubborn.exit_code == -signal.SIGKILL
    assert "SIGKILL" in (stubborn.reason or "")
    assert group_members(pgids) == []
    # the registry on disk says the same
    data = json.loads((s.logdir / "perfwatch.json").read_text())
    assert {r["run_id"]: r["state"] for r in data["runs"]} == {
        "crash.r0": "failed", "hang.r0": "stopped", "stubborn.r0": "stopped"}


def test_pause_stops_the_group_and_resume_continues(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        jobs:
          - {{name: long, cmd: [python, {FAKE}, --epochs, 400, --step, 0.05]}}
        """)
    owned.append(s)
    assert wait_for(lambda: (s.logdir / "long.r0" / "mllog.txt").exists() and
                    b"eval_accuracy" in (s.logdir / "long.r0" / "mllog.txt").read_bytes(), tick=s.poll)
    info = s.procs()["long.r0"]
    assert info.pgid is not None
    pids = group_members({info.pgid})
    assert len(pids) == 2  # the supervisor and the workload
    assert s.can("pause", "long.r0") and not s.can("resume", "long.r0")
    s.pause("long.r0")
    assert s.procs()["long.r0"].state is RunState.PAUSED
    assert wait_for(lambda: all(psutil.Process(p).status() == psutil.STATUS_STOPPED for p in pids))
    size = (s.logdir / "long.r0" / "mllog.txt").stat().st_size
    s.poll()
    assert (s.logdir / "long.r0" / "mllog.txt").stat().st_size == size
    s.resume("long.r0")
    assert s.procs()["long.r0"].state is RunState.RUNNING
    assert wait_for(lambda: all(psutil.Process(p).status() != psutil.STATUS_STOPPED for p in pids))
    assert wait_for(lambda: (s.logdir / "long.r0" / "mllog.txt").stat().st_size > size, tick=s.poll)
    s.kill("long.r0")
    assert wait_for(lambda: s.done, tick=s.poll)
    assert s.procs()["long.r0"].state is RunState.KILLED


def test_restart_keeps_earlier_attempts(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        jobs:
          - {{name: crash, cmd: [python, {FAKE}, --mode, crash]}}
        """)
    owned.append(s)
    assert wait_for(lambda: s.done, tick=s.poll)
    first = (s.logdir / "crash.r0" / "output.log").read_text()
    assert s.can("restart", "crash.r0")
    s.restart("crash.r0")
    assert wait_for(lambda: s.done, tick=s.poll)
    info = s.procs()["crash.r0"]
    assert info.attempt == 2 and info.state is RunState.FAILED
    folder = s.logdir / "crash.r0"
    assert (folder / ".attempt-1.output.log").read_text() == first
    assert (folder / ".attempt-1.mllog.txt").exists() and (folder / ".attempt-1.exit.json").exists()
    assert (folder / "mllog.txt").exists() and (folder / "output.log").read_text().count("fake workload") == 1


def test_leftover_children_are_killed_with_the_run(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        jobs:
          - {{name: parent, cmd: [python, {FAKE}, --mode, child, --epochs, 2]}}
        """)
    owned.append(s)
    assert wait_for(lambda: s.procs()["parent.r0"].pgid is not None, tick=s.poll)
    pgid = s.procs()["parent.r0"].pgid
    assert pgid is not None
    assert wait_for(lambda: s.done, tick=s.poll)
    assert s.procs()["parent.r0"].state is RunState.SUCCEEDED
    assert wait_for(lambda: group_members({pgid}) == [])


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        real = psutil.Process(victim.pid).create_time()
        impostor = launch.adopt(victim.pid, real - 100.0, tmp_path)  # same pid, different process
        assert not impostor.is_ours()
        assert impostor.signal(signal.SIGKILL) is False
        assert victim.poll() is None
        assert launch.adopt(victim.pid, real, tmp_path).is_ours()
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()


def test_isolate_per_device_pins_cpus_and_caps_memory(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        scheduler: {{max_parallel: 2}}
        jobs:
          - {{name: iso, repeat: 2, isolate: per_device, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    owned.append(s)
    assert wait_for(lambda: all((s.logdir / r / "output.log").exists() and
                                "waiting forever" in (s.logdir / r / "output.log").read_text()
                                for r in ("iso.r0", "iso.r1")), tick=s.poll)
    ncpu = len(os.sched_getaffinity(0))
    affinities = []
    for info in s.procs().values():
        assert info.pid is not None
        workload = psutil.Process(info.pid).children()[0].pid  # the runner's child
        affinities.append(psutil.Process(workload).cpu_affinity())
        limits = Path(f"/proc/{workload}/limits").read_text()
        line = next(ln for ln in limits.splitlines() if ln.startswith("Max address space"))
        assert int(line.split()[3]) <= psutil.virtual_memory().total // 2 + 1
    assert all(len(a) == max(1, ncpu // 2) for a in affinities)
    if ncpu >= 2:
        assert affinities[0] != affinities[1]  # each run its own share of the cores
    s.stop_all()
    assert wait_for(lambda: s.done, tick=s.poll)
