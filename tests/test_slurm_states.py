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
from perfwatch.core.control.scheduler import Scheduler

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


def slurm_cmd(*argv: str) -> subprocess.CompletedProcess[str]:
    """A Slurm client command, bounded in time like every call perfwatch makes."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)


def campaign(tmp_path: Path, name: str, scheduler_keys: str, job: str) -> Scheduler:
    """One campaign of its own (the scheduler block is campaign-wide), in tmp_path/name."""
    folder = tmp_path / name
    folder.mkdir()
    return scheduler(folder, f"""
        scheduler: {{backend: slurm, {scheduler_keys}}}
        jobs:
          - {{name: {name}, cmd: {job}}}
        """)


def tick(*schedulers: Scheduler) -> None:
    for s in schedulers:
        s.poll()


def test_preempted_cancelled_or_requeued_and_deadline_as_slurm_says(slurm, tmp_path: Path, quick_polls) -> None:  # type: ignore[no-untyped-def]
    """Preemption by a higher-tier partition (tests/slurm_cluster.py: `low` cancels, `lowrq` requeues)
    and a --deadline the job cannot meet: Slurm's record (scontrol show job) against perfwatch's run."""
    low = campaign(tmp_path, "low", "partition: low", HANG)
    lowrq = campaign(tmp_path, "lowrq", "partition: lowrq", HANG)
    # a 2 h time limit cannot end before a deadline 1 h away: Slurm ends the job DEADLINE, never started
    late = campaign(tmp_path, "late", "time_limit: 2h, sbatch_args: [--deadline=now+1hour]", HANG)
    every = (low, lowrq, late)
    try:
        assert wait_for(lambda: low.runs["low.r0"].state is RunState.RUNNING
                        and lowrq.runs["lowrq.r0"].state is RunState.RUNNING, timeout=60, tick=lambda: tick(*every))
        assert wait_for(lambda: "waiting forever" in output(tmp_path / "low", "low.r0")
                        and "waiting forever" in output(tmp_path / "lowrq", "lowrq.r0"), timeout=60, tick=lambda: tick(*every))
        victim, requeued = (str(s.runs[f"{n}.r0"].record.slurm_job_id) for s, n in ((low, "low"), (lowrq, "lowrq")))
        # a job in the higher-tier partition wants the whole node: Slurm preempts both
        high = slurm_cmd("sbatch", "--parsable", "--partition=high", "--exclusive", "--output=/dev/null",
                         "--wrap", "sleep 1")
        assert high.returncode == 0, high.stderr
        assert wait_for(lambda: low.runs["low.r0"].state.terminal and lowrq.runs["lowrq.r0"].attempt == 2,
                        timeout=60, tick=lambda: tick(*every))
        assert job_field(victim, "JobState") == "PREEMPTED"
        assert low.runs["low.r0"].state is RunState.CANCELLED
        assert "Slurm: PREEMPTED, preempted by Slurm for another job" in (low.runs["low.r0"].reason or "")
        # PreemptMode=REQUEUE: Slurm says the same job is pending again, restart 1; perfwatch: the same run, attempt 2
        # (COMPLETING while the earlier attempt's processes end, then PENDING)
        assert wait_for(lambda: job_field(requeued, "JobState") == "PENDING", timeout=30, tick=lambda: tick(*every))
        assert job_field(requeued, "Restarts") == "1"
        run = lowrq.runs["lowrq.r0"]
        assert run.state is RunState.STARTING and run.record.slurm_job_id == requeued
        assert "requeued by Slurm (restart 1)" in (run.reason or "")
        assert [(a["attempt"], a["state"], a["slurm_job_id"]) for a in run.record.attempts] == [(1, "requeued", requeued)]

        assert wait_for(lambda: late.runs["late.r0"].state.terminal, timeout=30, tick=lambda: tick(*every))
        deadline = str(late.runs["late.r0"].record.slurm_job_id)
        assert job_field(deadline, "JobState") == "DEADLINE" and job_field(deadline, "Reason") == "DeadLine"
        assert late.runs["late.r0"].state is RunState.TIMEOUT
        # Slurm's ExitCode of a job that never ran (0:1) is no exit status: no "killed by SIGHUP"
        assert late.runs["late.r0"].reason == "Slurm: DEADLINE, the job's --deadline passed (the job never started)"
        assert late.runs["late.r0"].exit_code is None and job_field(deadline, "BatchHost") == ""
    finally:
        for s in every:
            s.close(stop_runs=True)


def test_node_fail_ends_a_job_that_may_not_be_requeued_and_requeues_one_that_may(  # type: ignore[no-untyped-def]
        slurm_private, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`scontrol update state=down` on the node running two jobs: the one sbatch'ed --no-requeue ends
    NODE_FAIL; the other (Slurm's default: requeue allowed) is requeued, the same run's next attempt.
    On a cluster of its own: after a node failure Slurm may show the node `mixed` with nothing on it."""
    for key, value in {**slurm_private.env(), POLL_ENV: "1"}.items():
        monkeypatch.setenv(key, value)
    norq = campaign(tmp_path, "norq", "sbatch_args: [--no-requeue]", HANG)
    rq = campaign(tmp_path, "rq", "time_limit: 10m", HANG)
    node = slurm_private.node_names()[0]
    try:
        assert wait_for(lambda: all("waiting forever" in output(tmp_path / n, f"{n}.r0") for n in ("norq", "rq")),
                        timeout=60, tick=lambda: tick(norq, rq))
        failed, again = str(norq.runs["norq.r0"].record.slurm_job_id), str(rq.runs["rq.r0"].record.slurm_job_id)
        assert job_field(failed, "BatchHost") == node == job_field(again, "BatchHost")
        down = slurm_cmd("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=perfwatch-test")
        assert down.returncode == 0, down.stderr
        assert wait_for(lambda: norq.runs["norq.r0"].state.terminal and rq.runs["rq.r0"].attempt == 2, timeout=60,
                        tick=lambda: tick(norq, rq))
        assert job_field(failed, "JobState") == "NODE_FAIL" and job_field(failed, "Reason") == "NodeDown"
        assert norq.runs["norq.r0"].state is RunState.FAILED
        assert "Slurm: NODE_FAIL, a node of the job failed" in (norq.runs["norq.r0"].reason or "")
        assert job_field(again, "Restarts") == "1"
        run = rq.runs["rq.r0"]
        assert run.record.slurm_job_id == again and run.state is RunState.STARTING
        assert "requeued by Slurm (restart 1)" in (run.reason or "")
    finally:
        for s in (norq, rq):
            s.close(stop_runs=True)


def test_final_state_from_sacct_once_the_controller_forgot_the_job(slurm_accounting, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With accounting on, a job that ended while no perfwatch watched and that the controller no longer
    knows is read from `sacct` (tests/slurm_cluster.py: slurmdbd on a MariaDB of its own). Without it,
    the scancel'ed run would be `killed by SIGTERM` (its exit.json) and the DEADLINE one `unknown`."""
    for key, value in {**slurm_accounting.env(), POLL_ENV: "1"}.items():
        monkeypatch.setenv(key, value)
    gone = campaign(tmp_path, "gone", "time_limit: 10m", HANG)
    # held in Slurm until released: it reaches its DEADLINE only once its owner has gone
    held = campaign(tmp_path, "held", "time_limit: 2h, sbatch_args: [--hold, --deadline=now+1hour]", HANG)
    try:
        assert wait_for(lambda: "waiting forever" in output(tmp_path / "gone", "gone.r0")
                        and gone.runs["gone.r0"].state is RunState.RUNNING
                        and held.runs["held.r0"].record.slurm_job_id is not None, timeout=60, tick=lambda: tick(gone, held))
        cancelled, late = str(gone.runs["gone.r0"].record.slurm_job_id), str(held.runs["held.r0"].record.slurm_job_id)
        assert job_field(late, "Reason") == "JobHeldUser"
    finally:
        for s in (gone, held):
            s.close(stop_runs=False)  # the owner is gone; its jobs stay in Slurm
    from test_slurm_backend import record

    assert record(tmp_path / "gone/logdir", "gone.r0")["state"] == "running"
    assert record(tmp_path / "held/logdir", "held.r0")["state"] == "starting"
    assert slurm_cmd("scancel", cancelled).returncode == 0
    assert slurm_cmd("scontrol", "release", late).returncode == 0

    def accounted() -> dict[str, str]:
        out = slurm_cmd("sacct", "-n", "-P", "-X", "-j", f"{cancelled},{late}", "-o", "JobID,State").stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    assert wait_for(lambda: accounted() == {cancelled: "CANCELLED by 0", late: "DEADLINE"}, timeout=30, step=0.3), \
        accounted()
    # the controller forgets both jobs (as MinJobAge does, which slurmctld applies only once a minute)
    slurm_accounting.stop_controller(wait=2.0)
    slurm_accounting.start_controller(forget=True)
    for job in (cancelled, late):
        assert "Invalid job id" in slurm_cmd("scontrol", "show", "job", job).stderr
    owners = [Scheduler.take_over(tmp_path / name / "logdir") for name in ("gone", "held")]
    assert all(owners)
    gone, held = owners  # type: ignore[assignment]
    try:
        assert wait_for(lambda: gone.runs["gone.r0"].state.terminal and held.runs["held.r0"].state.terminal,
                        timeout=30, tick=lambda: tick(gone, held))
        assert gone.runs["gone.r0"].state is RunState.CANCELLED, gone.runs["gone.r0"].reason
        assert "Slurm: CANCELLED, cancelled in Slurm, not by perfwatch (by uid 0 root)" in (gone.runs["gone.r0"].reason or "")
        assert held.runs["held.r0"].state is RunState.TIMEOUT, held.runs["held.r0"].reason
        assert held.runs["held.r0"].reason == "Slurm: DEADLINE, the job's --deadline passed (the job never started)"
    finally:
        for s in (gone, held):
            s.close(stop_runs=False)


# squeue(1) and sacct(1) of Slurm 22.05, "JOB STATE CODES": every state a job ends in, by its short code
DOCUMENTED_END_STATES = {"BF": "BOOT_FAIL", "CA": "CANCELLED", "CD": "COMPLETED", "DL": "DEADLINE", "F": "FAILED",
                         "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY", "PR": "PREEMPTED", "TO": "TIMEOUT"}


class DocumentedSlurm:
    """Slurm's client commands answering as documented, for the end states the test cluster cannot
    produce (OUT_OF_MEMORY needs memory enforcement, BOOT_FAIL a node boot): the controller has
    forgotten the job and `sacct -n -P` (parsable, `|`-separated) gives its final state."""

    sacct = True

    def __init__(self, sacct_rows: str) -> None:
        self.rows = sacct_rows

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        if argv[:3] == ["scontrol", "-o", "show"]:
            return subprocess.CompletedProcess(argv, 0, "", "")  # the controller knows no job any more
        if argv[0] == "sacct":
            return subprocess.CompletedProcess(argv, 0, self.rows, "")
        return subprocess.CompletedProcess(argv, 1, "", f"{argv[0]}: not expected")


def test_every_documented_end_state_is_mapped_and_oom_boot_fail_read_from_sacct_text(tmp_path: Path) -> None:
    from perfwatch.core.control.backends import BackendConfig
    from perfwatch.core.control.backends.slurm import SlurmBackend, SlurmRun
    from perfwatch.core.control.backends.slurm_states import ENDED
    from perfwatch.core.control.scheduler import exit_state

    assert set(DOCUMENTED_END_STATES.values()) <= set(ENDED)
    expected = {"OUT_OF_MEMORY": "Slurm: OUT_OF_MEMORY, out of memory (Slurm's memory limit) (killed by SIGKILL)",
                "BOOT_FAIL": "Slurm: BOOT_FAIL, a node of the job failed to boot (the job never started)"}
    rows = "41|OUT_OF_MEMORY|0:125|perfwatch-oom.r0|n1\n42|BOOT_FAIL|0:0|perfwatch-boot.r0|None assigned\n"
    backend = SlurmBackend(BackendConfig(backend="slurm"), commands=DocumentedSlurm(rows))  # type: ignore[arg-type]
    runs = {}
    for job, word in (("41", "OUT_OF_MEMORY"), ("42", "BOOT_FAIL")):
        folder = tmp_path / word
        folder.mkdir()
        runs[word] = SlurmRun(backend, job, folder, f"perfwatch-{word}")
    # the OOM job ran: its supervisor recorded the workload killed by SIGKILL (the kernel's OOM killer)
    (tmp_path / "OUT_OF_MEMORY" / "exit.json").write_text('{"exit_code": null, "signal": "SIGKILL"}')
    backend.refresh()
    for word, run in runs.items():
        code = run.poll()
        assert code is not None, word
        state, words = run.ended_as()
        assert state is RunState.FAILED, word
        final, reason = exit_state(code, unknown=run.unknown, intent=None, reason=None, ended_as=(state, words),
                                   never_ran=run.never_ran)
        assert (final, reason) == (RunState.FAILED, expected[word])
