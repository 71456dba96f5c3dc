"""Slurm's own record is the truth: final states, requeue, outages and the load on the controller.

Every expectation is read from Slurm itself (`scontrol show job`, `squeue`, `sdiag`) on the real
test cluster (tests/slurm_cluster.py), never from perfwatch's view alone.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_helpers import FAKE, ROOT, scheduler, wait_for
from test_slurm_backend import job_field, squeue_state

from perfwatch.core.control.backends.slurm import POLL_ENV
from perfwatch.core.control.controller import RunState

HANG = f"[python, {FAKE}, --mode, hang, --epochs, 5, --step, 0.05]"


@pytest.fixture
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POLL_ENV, "1")


def output(tmp_path: Path, run_id: str) -> str:
    path = tmp_path / "logdir" / run_id / "output.log"
    return path.read_text() if path.exists() else ""


def test_final_states_come_from_slurm_and_requeue_is_the_same_run(slurm, tmp_path: Path, quick_polls) -> None:  # type: ignore[no-untyped-def]
    gate = tmp_path / "gate"
    s = scheduler(tmp_path, f"""
        scheduler: {{backend: slurm, time_limit: 10m}}
        defaults: {{grace: 3s}}
        jobs:
          - {{name: limit, cmd: {HANG}}}
          - {{name: outside, cmd: {HANG}}}
          - {{name: ours, cmd: {HANG}}}
          - {{name: again, cmd: [python, {FAKE}, --epochs, 3, --step, 0.05, --gate, {gate}]}}
        """)
    try:
        # the node has 2 CPUs: limit and outside run first, ours and again wait in Slurm's queue
        assert wait_for(lambda: all(s.runs[r].state is RunState.RUNNING for r in ("limit.r0", "outside.r0")), timeout=60,
                        tick=s.poll)
        ids = {rid: str(s.runs[rid].record.slurm_job_id) for rid in s.runs}
        # an operator shortens the job's limit: Slurm itself ends it with TIMEOUT (checked every 30 s);
        # EndTime must lie after StartTime, so the job has run a little first
        assert wait_for(lambda: "waiting forever" in output(tmp_path, "limit.r0"), timeout=60, tick=s.poll)
        time.sleep(1.5)
        for change in ("EndTime=now", "TimeLimit=0:01"):
            done = subprocess.run(["scontrol", "update", f"JobId={ids['limit.r0']}", change], capture_output=True,
                                  text=True, check=False)
            assert done.returncode == 0, (change, done.stderr, job_field(ids["limit.r0"], "JobState"))

        # scancel behind perfwatch's back: cancelled, Slurm's word shown
        subprocess.run(["scancel", ids["outside.r0"]], check=True)
        assert wait_for(lambda: s.runs["outside.r0"].state.terminal, timeout=30, tick=s.poll)
        assert job_field(ids["outside.r0"], "JobState") == "CANCELLED"
        assert s.runs["outside.r0"].state is RunState.CANCELLED
        assert "Slurm: CANCELLED, cancelled in Slurm, not by perfwatch" in (s.runs["outside.r0"].reason or "")

        # perfwatch's own stop is an scancel: Slurm records CANCELLED, not FAILED 143
        assert wait_for(lambda: "waiting forever" in output(tmp_path, "ours.r0"), timeout=60, tick=s.poll)
        assert wait_for(lambda: s.runs["ours.r0"].state is RunState.RUNNING, timeout=10, tick=s.poll)
        s.stop("ours.r0")
        assert wait_for(lambda: s.runs["ours.r0"].state.terminal, timeout=30, tick=s.poll)
        assert s.runs["ours.r0"].state is RunState.STOPPED
        assert job_field(ids["ours.r0"], "JobState") == "CANCELLED"
        assert "Slurm: CANCELLED" in (s.runs["ours.r0"].reason or "")

        # scontrol requeue: the same run and job, next attempt, pending again; perfwatch cancels nothing
        assert wait_for(lambda: "waiting for the gate file" in output(tmp_path, "again.r0"), timeout=60, tick=s.poll)
        subprocess.run(["scontrol", "requeue", ids["again.r0"]], check=True)
        assert wait_for(lambda: s.runs["again.r0"].attempt == 2, timeout=30, tick=s.poll)
        assert s.runs["again.r0"].state is RunState.STARTING
        assert "requeued by Slurm (restart 1)" in (s.runs["again.r0"].reason or "")
        gate.touch()
        assert wait_for(lambda: s.runs["again.r0"].state.terminal, timeout=90, tick=s.poll)
        assert s.runs["again.r0"].state is RunState.SUCCEEDED, s.runs["again.r0"].reason
        assert job_field(ids["again.r0"], "JobState") == "COMPLETED" and job_field(ids["again.r0"], "Restarts") == "1"
        record = s.runs["again.r0"].record
        assert record.slurm_job_id == ids["again.r0"]
        assert [(a["attempt"], a["state"], a["slurm_job_id"]) for a in record.attempts] == [(1, "requeued", ids["again.r0"])]
        assert "waiting for the gate file" in (tmp_path / "logdir/again.r0/.attempt-1.output.log").read_text()

        # the shortened time limit: Slurm's TIMEOUT is perfwatch's timeout
        assert wait_for(lambda: s.runs["limit.r0"].state.terminal, timeout=90, tick=s.poll)
        assert job_field(ids["limit.r0"], "JobState") == "TIMEOUT"
        assert s.runs["limit.r0"].state is RunState.TIMEOUT
        assert "Slurm: TIMEOUT" in (s.runs["limit.r0"].reason or "")
    finally:
        s.close(stop_runs=True)


def rpc_counts() -> dict[str, int]:
    """sdiag's RPC counts by message type since its last reset."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    block = out.split("Remote Procedure Call statistics by message type", 1)[1].split("statistics by user", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+\(\s*\d+\)\s+count:(\d+)", block, re.M)}


def test_one_batched_query_per_interval_measured_with_sdiag(slurm, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(POLL_ENV, raising=False)  # the default interval, as a user gets it
    s = scheduler(tmp_path, f"""
        scheduler: {{backend: slurm}}
        jobs:
          - {{name: job, repeat: 4, cmd: {HANG}}}
        """)
    try:
        assert wait_for(lambda: sum(r.state is RunState.RUNNING for r in s.runs.values()) == 2, timeout=60,
                        tick=s.poll)
        subprocess.run(["sdiag", "--reset"], check=True, capture_output=True)
        window = 20.0
        start = time.monotonic()
        while time.monotonic() - start < window:
            s.poll()
            time.sleep(0.25)
        counts = rpc_counts()
        # what clients asked (not slurmd's own messages, nor sdiag's statistics request)
        asked = {k: v for k, v in counts.items()
                 if k != "REQUEST_STATS_INFO" and not k.startswith(("MESSAGE_", "REQUEST_COMPLETE", "REQUEST_STEP"))}
        print(f"sdiag over {window:g} s of a 4-job campaign: {asked}")
        assert sum(asked.values()) / window <= 0.5, asked
        assert not {"REQUEST_JOB_INFO_SINGLE", "REQUEST_FED_INFO", "REQUEST_PARTITION_INFO"} & set(asked), asked
        assert asked.get("REQUEST_JOB_INFO", 0) >= 1, asked  # it did ask (every 10 s), batched
    finally:
        s.close(stop_runs=True)


def test_slurmctld_down_submission_waits_then_starts_and_stale_status_refuses_control(  # type: ignore[no-untyped-def]
        slurm, tmp_path: Path, quick_polls) -> None:
    s = scheduler(tmp_path, f"""
        scheduler: {{backend: slurm}}
        jobs:
          - {{name: quick, cmd: [python, {FAKE}, --epochs, 3, --step, 0.05]}}
          - {{name: long, cmd: {HANG}}}
        """)
    try:
        slurm.stop_controller()
        s.poll()  # sbatch gets no answer: both runs wait, queued, saying why
        assert s.runs["quick.r0"].state is RunState.QUEUED
        assert (s.runs["quick.r0"].reason or "").startswith("waiting for slurmctld: "), s.runs["quick.r0"].reason
        assert s.runs["long.r0"].state is RunState.QUEUED and s.runs["quick.r0"].record.slurm_job_id is None
        slurm.start_controller()
        assert wait_for(lambda: s.runs["quick.r0"].state.terminal, timeout=90, tick=s.poll)
        assert s.runs["quick.r0"].state is RunState.SUCCEEDED
        assert job_field(str(s.runs["quick.r0"].record.slurm_job_id), "JobState") == "COMPLETED"

        assert wait_for(lambda: s.runs["long.r0"].state is RunState.RUNNING, timeout=60, tick=s.poll)
        job = str(s.runs["long.r0"].record.slurm_job_id)
        slurm.stop_controller()
        assert wait_for(lambda: "Slurm status stale" in (s.runs["long.r0"].reason or ""), timeout=60, tick=s.poll)
        assert s.runs["long.r0"].state is RunState.RUNNING  # last known, shown as stale
        pause = subprocess.Popen([sys.executable, "-m", "perfwatch", "control", str(tmp_path / "logdir"), "long.r0",
                                  "pause"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert wait_for(lambda: pause.poll() is not None, timeout=60, tick=s.poll)
        assert pause.returncode == 1, pause.stderr.read() if pause.stderr else ""
        assert "pause not done: Slurm status stale" in (pause.stderr.read() if pause.stderr else "")
        assert s.runs["long.r0"].state is RunState.RUNNING
        slurm.start_controller()
        time.sleep(3)  # a pause sent anyway would be applied by now
        assert squeue_state(job) == "RUNNING"
        assert wait_for(lambda: s.runs["long.r0"].state is RunState.RUNNING and "stale" not in (s.runs["long.r0"].reason or ""),
                        timeout=30, tick=s.poll)
        s.stop("long.r0")
        assert wait_for(lambda: s.runs["long.r0"].state is RunState.STOPPED, timeout=30, tick=s.poll)
    finally:
        if not (slurm.root / "slurmctld.pid").exists() or subprocess.run(["scontrol", "ping"]).returncode != 0:
            slurm.start_controller()
        s.close(stop_runs=True)


def test_interrupted_stop_is_completed_once_by_attach(slurm, tmp_path: Path, quick_polls) -> None:  # type: ignore[no-untyped-def]
    """A launch that dies while its stop is in flight: `attach` finishes it, says it once, Slurm says CANCELLED."""
    s = scheduler(tmp_path, f"""
        scheduler: {{backend: slurm}}
        defaults: {{grace: 2s}}
        jobs:
          - {{name: job, cmd: [python, {FAKE}, --mode, ignore_term, --epochs, 5, --step, 0.05]}}
        """)
    logdir = tmp_path / "logdir"
    try:
        assert wait_for(lambda: "waiting forever" in output(tmp_path, "job.r0"), timeout=60, tick=s.poll)
        job = str(s.runs["job.r0"].record.slurm_job_id)
        s.stop("job.r0")  # scancel sent; the workload ignores SIGTERM
    finally:
        s.close(stop_runs=False)  # perfwatch gone before the job ended: perfwatch.json says "stopping"
    done = subprocess.run([sys.executable, "-m", "perfwatch", "attach", str(logdir), "--headless"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr  # not all runs succeeded: one was stopped
    from test_slurm_backend import record

    final = record(logdir, "job.r0")
    assert final["state"] == "stopped" and final["slurm_job_id"] == job
    assert final["reason"].count("stopped by user") == 1 and final["reason"].count("after SIGTERM") <= 1, final["reason"]
    assert "Slurm: CANCELLED" in final["reason"]
    assert job_field(job, "JobState") == "CANCELLED"
