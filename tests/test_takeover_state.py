"""Everything the scheduler decides on is in perfwatch.json: a take-over resumes a paused run without a
spurious timeout, and per_device CPU slots of live runs are not handed out again."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
from launch_helpers import FAKE, scheduler, wait_for

from perfwatch.core.control.controller import RunState
from perfwatch.core.control.scheduler import Scheduler
from perfwatch.core.engine import attach_session


def workload_cpus(supervisor: int | None) -> list[int]:
    """The CPUs of the workload below a supervisor (it applies the affinity before starting it)."""
    assert supervisor is not None
    proc = psutil.Process(supervisor)
    assert wait_for(lambda: bool(proc.children()))
    return proc.children()[0].cpu_affinity()


def take_over(s: Scheduler, owned: list[Scheduler]) -> Scheduler:
    s.poll()
    s.close(stop_runs=False)  # this perfwatch goes away; its runs live on
    ctl = attach_session(s.logdir).controller
    assert isinstance(ctl, Scheduler)
    owned.append(ctl)
    return ctl


def test_paused_time_survives_a_take_over(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        defaults: {{timeout: 3s, grace: 1s}}
        jobs:
          - {{name: p, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    s.poll()
    s.pause("p.r0")
    time.sleep(3.5)  # paused longer than the timeout: paused time must not count
    ctl = take_over(s, owned)
    assert ctl.procs()["p.r0"].state is RunState.PAUSED
    ctl.resume("p.r0")
    ctl.poll()
    time.sleep(0.5)
    ctl.poll()
    assert ctl.procs()["p.r0"].state is RunState.RUNNING, ctl.procs()["p.r0"].reason
    assert wait_for(lambda: ctl.done, tick=ctl.poll, timeout=15)  # and the timeout still applies later
    assert ctl.procs()["p.r0"].state is RunState.TIMEOUT


def test_per_device_cpu_slots_survive_a_take_over(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        scheduler: {{max_parallel: 2}}
        defaults: {{isolate: per_device, grace: 1s}}
        jobs:
          - {{name: c, repeat: 3, cmd: [python, {FAKE}, --mode, hang]}}
        """)
    s.poll()
    pids = {rid: i.pid for rid, i in s.procs().items() if i.pid}
    assert set(pids) == {"c.r0", "c.r1"}
    ctl = take_over(s, owned)
    ctl.stop("c.r1")  # frees slot 1; c.r2 must get it, not slot 0 of the live c.r0
    assert wait_for(lambda: ctl.procs()["c.r2"].pid is not None, tick=ctl.poll)
    kept, new = workload_cpus(pids["c.r0"]), workload_cpus(ctl.procs()["c.r2"].pid)
    if len(psutil.Process().cpu_affinity()) >= 2:
        assert set(kept).isdisjoint(new), (kept, new)
    assert ctl.runs["c.r2"].slot != ctl.runs["c.r0"].slot
    ctl.stop_all()
    assert wait_for(lambda: ctl.done, tick=ctl.poll)
