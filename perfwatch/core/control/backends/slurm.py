"""The Slurm backend: each run attempt is one `sbatch` job; control maps to scontrol/scancel.

Submission is an argv list. The batch script is a constant (`BATCH_SCRIPT`): it execs the
Python perfwatch runs in with the in-job runner (`slurm_job.py`) and a JSON file in the run's
folder that holds the workload's argv and environment; no value from the campaign is ever
put into shell text. Inside the job the runner execs the same supervisor a local run has, with
`--output` pointing at the run's output.log, so the run folder looks exactly like a local one.

State is Slurm's (table in slurm_states.py). One `scontrol -o show job` for all of a campaign's
jobs every `poll_interval` (default `DEFAULT_POLL` s; one RPC, REQUEST_JOB_INFO: the records squeue
would fetch, without its partition lookup and without per-job or federation requests); ended jobs
still in the controller's memory are in it with their final state, restart count and exit code.
Jobs the controller no longer knows are looked up in `sacct` when accounting is on (one batched
call), and otherwise decided by the run's own exit.json. Between two queries only
files are read: when a job's exit.json appears (it is ending) the next query comes sooner
(`SOON` s), so a campaign waits for Slurm's final word without asking the controller more often.

Control: pause `scontrol suspend`, resume `scontrol resume`, stop `scancel` (Slurm sends SIGTERM
to every step, SIGKILL after the site's KillWait, and records CANCELLED), kill `scancel --full
--signal=KILL` then `scancel` (so the record still says CANCELLED), start-now `scontrol top`.
perfwatch never cancels a job it did not decide to stop: a job Slurm requeues stays the same
run, next attempt. What Slurm refused (suspend is for operators on most clusters) is remembered
and shown as the reason a key is greyed out; a request that cannot be delivered because the
controller does not answer is refused with that reason and never sent again later.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfwatch.core.control.backends import BackendConfig, BackendError, Launch, TryLater, why_not
from perfwatch.core.control.backends.slurm_states import LIVE, PENDING, SUSPENDED, ended_as, requeued_text
from perfwatch.core.control.process import read_exit
from perfwatch.core.control.states import RunState
from perfwatch.core.control.supervisor import signal_number
from perfwatch.core.layout import EXIT_FILE, OUTPUT_FILE, SLURM_BATCH_FILE, SLURM_JOB_FILE, write_json_atomic

if TYPE_CHECKING:  # annotations only: campaign.py imports this package's settings
    from perfwatch.core.control.campaign import RunSpec
    from perfwatch.core.control.registry import RunRecord

BATCH_SCRIPT = '#!/bin/sh\n# perfwatch: the run\'s argv is in the JSON file "$2"\nexec "$1" -m perfwatch.core.control.backends.slurm_job "$2"\n'
DEFAULT_POLL = 10.0  # s between batched status queries (0.1 RPC/s for any number of jobs)
POLL_ENV = "PERFWATCH_SLURM_POLL"  # seconds; overrides the campaign's poll_interval (a site's or a test's choice)
SOON = 2.0  # s: the next query when a job is visibly ending (its exit.json appeared) or after a control action
EXIT_WAIT = 10.0  # s to wait for exit.json after Slurm says the job ended (shared filesystems lag)
RETRY_FIRST, RETRY_MAX = 5.0, 60.0  # s: backoff of submissions while slurmctld does not answer
_TIMEOUT = 30
STALE_STEP = 10  # s: how finely a stale status's age is shown
_FIELD = {name: re.compile(rf"\b{name}=(\S*)")
          for name in ("JobState", "Reason", "ExitCode", "Restarts", "JobName", "BatchHost")}
# what Slurm's client commands print when the controller does not answer (connect failure, timeouts)
_UNREACHABLE = re.compile(r"contact slurm controller|connect(ion)? (failure|refused)|timed out|Zero Bytes were "
                          r"transmitted|Unable to connect|Communication connection failure", re.IGNORECASE)


def unreachable(message: str) -> bool:
    """Whether a client command's error says the controller did not answer (not that it refused)."""
    return bool(_UNREACHABLE.search(message))


class SlurmCommands:
    """The Slurm client commands, run as argv lists with perfwatch's environment (SLURM_CONF too)."""

    def __init__(self) -> None:
        missing = [c for c in ("sbatch", "squeue", "scontrol", "scancel") if shutil.which(c) is None]
        if missing:
            raise BackendError(
                f"backend slurm: {', '.join(missing)} not found on PATH; run perfwatch where Slurm's client "
                "commands work (a login node, `module load slurm`), or use --backend local")
        self.sacct = shutil.which("sacct") is not None

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 255, "", f"{argv[0]}: no answer within {_TIMEOUT}s (timed out)")
        except OSError as exc:
            return subprocess.CompletedProcess(argv, 255, "", str(exc))


def _message(done: subprocess.CompletedProcess[str]) -> str:
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1].strip() if lines else f"exit {done.returncode}"


def _exit_code(text: str) -> int | None:
    """Slurm's `ExitCode=3:0` (status:signal) as perfwatch's code: 3, or -SIG when a signal ended it."""
    m = re.match(r"(\d+):(\d+)", text or "")
    if not m:
        return None
    status, sig = int(m.group(1)), int(m.group(2))
    return -sig if sig else status


def _job_view(line: str) -> JobView:
    """One job of `scontrol -o show job` (one line of `Key=value` fields)."""
    field = {name: (m.group(1) if (m := rx.search(line)) else "") for name, rx in _FIELD.items()}
    restarts = int(field["Restarts"]) if field["Restarts"].isdigit() else 0
    # a job that never got a node has no BatchHost (ended while pending: DEADLINE, a cancel, ...)
    return JobView(field["JobState"], field["Reason"], _exit_code(field["ExitCode"]), restarts,
                   field["JobName"] or None, ran=bool(field["BatchHost"]))


def job_name(run_id: str) -> str:
    """The Slurm job name of a run: how squeue shows it, and how re-adoption recognises it."""
    return f"perfwatch-{run_id}"


def job_instructions(config: BackendConfig, spec: RunSpec, run_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    """What the in-job runner (slurm_job.py) reads from SLURM_JOB_FILE: argv, environment, folders, container."""
    logdir = run_dir.parents[len(Path(spec.run_id).parts) - 1]  # run_dir is LOGDIR/<run id>
    return {
        "run_id": spec.run_id, "argv": list(spec.argv), "cwd": spec.cwd,
        "env": {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"},  # Slurm sets it from --gres
        "logdir": str(logdir), "run_dir": str(run_dir), "exit_file": str(run_dir / EXIT_FILE),
        "nnodes": spec.launcher.nnodes, "launcher": spec.launcher.type, "container_image": config.container_image,
        "container_mounts": list(config.container_mounts),
        "cache_clear": list(spec.cache_clear_cmd) if spec.cache_clear_cmd else None,
        "cache_clear_timeout": spec.cache_clear_timeout, "planned_python": sys.executable,
    }


def sbatch_argv(config: BackendConfig, spec: RunSpec, run_dir: Path) -> list[str]:
    """The sbatch options for one run (without the script and its arguments)."""
    tr = spec.launcher
    argv = ["sbatch", "--parsable", f"--job-name={job_name(spec.run_id)}",
            f"--output={run_dir / OUTPUT_FILE}", "--open-mode=append", f"--chdir={spec.cwd}",
            f"--nodes={tr.nnodes}", "--ntasks-per-node=1", f"--cpus-per-task={spec.threads * tr.nproc_per_node}"]
    if spec.devices:
        argv.append(f"--gres=gpu:{spec.devices}")
    for flag, value in (("partition", config.partition), ("account", config.account),
                        ("time", config.time_limit), ("qos", config.qos)):
        if value:
            argv.append(f"--{flag}={value}")
    return argv + list(config.sbatch_args)


@dataclass(frozen=True)
class JobView:
    """One job as the last batched query saw it."""

    state: str
    reason: str = ""
    exit_code: int | None = None
    restarts: int = 0
    name: str | None = None
    ran: bool = True  # it got a node (its batch script may have run); False: it ended while still pending


class SlurmRun:
    """A `RunHandle` for one Slurm job (all its attempts: a requeue keeps the job id)."""

    def __init__(self, backend: SlurmBackend, job_id: str, run_dir: Path, job_name: str, restarts: int = 0) -> None:
        self.backend, self.job_id, self.run_dir, self.job_name = backend, job_id, run_dir, job_name
        self.exit_record: dict | None = None
        self.returncode: int | None = None
        self.restarts = restarts  # Slurm's restart count this handle has accounted for
        self.refused: str | None = None
        self.intended = False  # perfwatch asked Slurm to end this job (stop, kill)
        self._ended_seen: float | None = None
        self._final: str | None = None  # Slurm's word for how the job ended
        backend.watch(job_id)

    pid = None
    pgid = None
    unknown = False  # Slurm always knows how a job ended
    never_ran = False  # set once Slurm says the job ended without ever getting a node

    def track(self) -> bool:
        return False  # its processes live on the compute nodes, under slurmstepd

    def _view(self) -> JobView | None:
        return self.backend.jobs.get(self.job_id)

    def requeued(self) -> str | None:
        """Slurm put the job back in its queue (scontrol requeue, preemption, a failed node): once per restart.

        The scheduler then keeps the ending attempt's files as `.attempt-N.*` (its processes may still
        write to them: they keep the renamed files open), so its exit.json no longer counts."""
        view = self._view()
        if view is None or view.restarts <= self.restarts:
            return None
        self.restarts = view.restarts
        self._ended_seen = None
        return requeued_text(view.restarts)

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        view = self._view()
        exit_there = (self.run_dir / EXIT_FILE).exists()
        if view is not None and view.state in LIVE:
            if exit_there or self.intended:
                self.backend.soon()  # ending: ask for Slurm's final word sooner
            return None
        if view is None and self.job_id not in self.backend.gone:
            if exit_there:
                self.backend.soon()
            return None  # not looked up yet
        record = read_exit(self.run_dir)
        if record is None and view is not None and view.state != "CANCELLED" and view.ran:
            now = time.monotonic()
            self._ended_seen = self._ended_seen or now
            if now - self._ended_seen < EXIT_WAIT:
                return None
        code: int | None = None
        if record is not None:
            self.exit_record = record
            if signal_number(record.get("signal")) is not None:
                code = -(signal_number(record.get("signal")) or 0)
            elif record.get("exit_code") is not None:
                code = int(record["exit_code"])
        if code is None and view is not None:
            code = view.exit_code
        self.returncode = -int(signal.SIGKILL) if code is None else code
        # ended while pending: no batch script ever ran, so Slurm's ExitCode (DEADLINE: 0:1) is no exit status
        self.never_ran = record is None and view is not None and not view.ran
        self._final = view.state if view is not None else None
        self.backend.unwatch(self.job_id)
        return self.returncode

    def ended_as(self) -> tuple[RunState | None, str | None]:
        if self._final is None:
            return None, None
        state, text = ended_as(self._final, self.intended)
        if self._final == "CANCELLED" and not self.intended:
            who = self.backend.cancelled_by(self.job_id)
            text = f"{text}{f' (by {who})' if who else ''}"
        return state, text

    def pending(self) -> str | None:
        view = self._view()
        if view is None:
            return "submitted" if self.job_id not in self.backend.gone else None
        if view.state == "COMPLETING" and view.restarts > 0 and not self.intended and self.restarts == view.restarts:
            return f"requeued by Slurm: the earlier attempt is ending (restart {view.restarts})"
        if view.state not in PENDING:
            return None
        reason = view.reason
        return f"pending in Slurm: {reason}" if reason and reason != "None" else "pending in Slurm"

    def paused(self) -> bool:
        view = self._view()
        return view is not None and view.state in SUSPENDED

    def _do(self, action: str, argv: list[str]) -> bool:
        """Send one control command; False (and `refused` set) when Slurm refused it or did not answer."""
        self.refused = None
        view = self._view()
        if view is not None and view.name is not None and view.name != self.job_name:
            self.refused = f"job {self.job_id} is not this run's job (Slurm calls it {view.name})"
            return False
        stale = self.backend.stale()
        if stale is not None:  # never queue a request for a controller that does not answer
            self.refused = stale
            return False
        done = self.backend.cmd.run(argv)
        if done.returncode != 0:
            why = _message(done)
            if unreachable(why):
                self.backend.lost(why)
                self.refused = f"slurmctld did not answer ({why}); not sent again"
            else:
                self.refused = f"Slurm refused it: {why}"
                self.backend.refused_by_slurm(action, why)
            return False
        self.backend.soon()
        return True

    def _set(self, state: str) -> None:
        view = self._view() or JobView(state)
        self.backend.jobs[self.job_id] = JobView(state, "", view.exit_code, view.restarts, view.name, view.ran)

    def pause(self) -> bool:
        ok = self._do("pause", ["scontrol", "suspend", self.job_id])
        if ok:
            self._set("SUSPENDED")
        return ok

    def resume(self) -> bool:
        ok = self._do("resume", ["scontrol", "resume", self.job_id])
        if ok:
            self._set("RUNNING")
        return ok

    def terminate(self) -> bool:
        if self.paused() and not self._do("resume", ["scontrol", "resume", self.job_id]):
            return False  # a suspended job must run to handle SIGTERM
        ok = self._do("stop", ["scancel", self.job_id])
        self.intended = self.intended or ok
        return ok

    def kill(self) -> bool:
        if self.pending() is not None:
            ok = self._do("kill", ["scancel", self.job_id])
        else:
            ok = self._do("kill", ["scancel", "--full", "--signal=KILL", self.job_id])
            if not ok and self.intended and self.backend.stale() is None:
                ok, self.refused = True, None  # already cancelled by a stop: Slurm is ending it (KillWait)
            if ok:
                self._do("kill", ["scancel", self.job_id])  # recorded as CANCELLED (refused if already ending)
                self.refused = None
        self.intended = self.intended or ok
        return ok

    def start_now(self) -> bool:
        return self._do("start_now", ["scontrol", "top", self.job_id])

    def cleanup(self) -> None:
        return None  # the job ended in Slurm (poll waits for its final state): nothing to cancel

    def facts(self) -> dict[str, Any]:
        return {"slurm_job_id": self.job_id, "pid": None, "pgid": None, "create_time": None}


class SlurmBackend:
    """Submits runs with sbatch and keeps one batched view of their Slurm states."""

    name = "slurm"
    assigns_devices = False

    def __init__(self, config: BackendConfig, commands: SlurmCommands | None = None) -> None:
        self.config = config
        self.cmd = commands or SlurmCommands()
        self.jobs: dict[str, JobView] = {}  # job id -> its last seen view
        self.gone: set[str] = set()  # job ids neither the controller nor sacct knows any more
        self.interval = poll_interval(config)
        self._watched: set[str] = set()
        self._due = 0.0  # monotonic time of the next query
        self._asked = 0.0  # monotonic time of the last query
        self.answered_at: float | None = None  # wall time of the last answer
        self.problem: str | None = None  # why the last query got no answer
        self._submit_fails = 0
        self.refusals: dict[str, str] = {}

    # ---- submission ---------------------------------------------------------------
    def start(self, spec: RunSpec, run_dir: Path, launch: Launch) -> SlurmRun:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / EXIT_FILE).unlink(missing_ok=True)
        write_json_atomic(run_dir / SLURM_JOB_FILE, job_instructions(self.config, spec, run_dir, launch.env))
        script = run_dir / SLURM_BATCH_FILE
        script.write_text(BATCH_SCRIPT)
        name = job_name(spec.run_id)
        job_id = self._submitted_before(name) if self._submit_fails else None
        if job_id is None:
            done = self.cmd.run([*sbatch_argv(self.config, spec, run_dir), str(script), sys.executable,
                                 str(run_dir / SLURM_JOB_FILE)])
            job_id = done.stdout.strip().split(";")[0] if done.returncode == 0 else ""
            if not job_id.isdigit():
                why = _message(done)
                if unreachable(why):
                    self._submit_fails += 1
                    self.lost(why)
                    wait = min(RETRY_MAX, RETRY_FIRST * 2 ** (self._submit_fails - 1))
                    raise TryLater(f"waiting for slurmctld: {why}", wait)
                raise OSError(f"sbatch refused the job: {why}")
        self._submit_fails = 0
        self.jobs.pop(job_id, None)
        return SlurmRun(self, job_id, run_dir, name)

    def _submitted_before(self, name: str) -> str | None:
        """After a submission without an answer, the job sbatch may have created anyway (never submit twice)."""
        done = self.cmd.run(["squeue", "--local", "-h", "--name", name, "-o", "%i"])
        ids = done.stdout.split() if done.returncode == 0 else []
        return ids[-1] if ids and ids[-1].isdigit() else None

    def adopt(self, record: RunRecord, run_dir: Path) -> SlurmRun | None:
        job_id = record.slurm_job_id or ""
        if not job_id.isdigit():
            return None
        restarts = sum(1 for a in record.attempts if str(a.get("slurm_job_id")) == job_id)  # requeues seen
        run = SlurmRun(self, job_id, run_dir, job_name(record.run_id), restarts=restarts)
        run.intended = record.intent is not None  # perfwatch had asked Slurm to end it
        return run

    # ---- state ----------------------------------------------------------------------
    def watch(self, job_id: str) -> None:
        self._watched.add(job_id)
        self._due = 0.0

    def unwatch(self, job_id: str) -> None:
        self._watched.discard(job_id)

    def soon(self) -> None:
        """Query again within SOON s (something visibly changed), never sooner than SOON after the last."""
        self._due = min(self._due, self._asked + SOON)

    def invalidate(self) -> None:
        self._due = 0.0

    def lost(self, why: str) -> None:
        """A client command got no answer from slurmctld: states are stale from now on."""
        self.problem = why

    def stale(self) -> str | None:
        """Why the states shown are old and how old, or None while the controller answers."""
        if self.problem is None:
            return None
        # the age in STALE_STEP steps: a run's reason (and perfwatch.json) changes every STALE_STEP s, not every poll
        age = int((time.time() - self.answered_at) // STALE_STEP * STALE_STEP) if self.answered_at is not None else None
        since = f" for {age}s+" if age is not None else ""
        return f"Slurm status stale{since}: slurmctld unreachable ({self.problem})"

    def refresh(self) -> None:
        """One `scontrol -o show job` for every watched job (sacct for those the controller forgot), at
        most every `interval` s: one RPC (REQUEST_JOB_INFO), the same job records squeue would fetch,
        without squeue's partition lookup."""
        now = time.monotonic()
        if not self._watched or now < self._due:
            return
        self._asked, self._due = now, now + self.interval
        ids = sorted(self._watched)
        done = self.cmd.run(["scontrol", "-o", "show", "job"])
        if done.returncode != 0:
            self.lost(_message(done))  # keep the last known states, shown as stale
            return
        self.problem, self.answered_at = None, time.time()
        seen: dict[str, JobView] = {}
        for line in done.stdout.splitlines():
            job_id = line.split(" ", 1)[0].removeprefix("JobId=")
            if job_id in self._watched:
                seen[job_id] = _job_view(line)
        missing = [i for i in ids if i not in seen]
        if missing:
            seen.update(self._sacct(missing))
        for job_id in ids:
            if job_id in seen:
                self.jobs[job_id] = seen[job_id]
            else:
                self.jobs.pop(job_id, None)
                self.gone.add(job_id)

    def _sacct_rows(self, ids: list[str], fields: str) -> list[list[str]]:
        if not self.cmd.sacct:
            return []
        done = self.cmd.run(["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", fields])
        if "accounting storage is disabled" in (done.stderr + done.stdout):
            self.cmd.sacct = False  # not on this cluster: never asked again
        if done.returncode != 0:
            return []
        return [line.strip().split("|") for line in done.stdout.splitlines()]

    def _sacct(self, ids: list[str]) -> dict[str, JobView]:
        out: dict[str, JobView] = {}
        for parts in self._sacct_rows(ids, "JobID,State,ExitCode,JobName,NodeList"):
            if len(parts) == 5 and parts[0] in ids and parts[1]:  # "CANCELLED by 0" -> CANCELLED
                # a job that never got a node is listed on "None assigned" (its ExitCode, DEADLINE: 1:0, is Slurm's)
                out[parts[0]] = JobView(parts[1].split()[0], "", _exit_code(parts[2]), 0, parts[3],
                                        ran=parts[4] != "None assigned")
        return out

    def cancelled_by(self, job_id: str) -> str | None:
        """Who cancelled a job, from accounting (`CANCELLED by 1234`) where it is on: `uid 1234 (name)`."""
        for parts in self._sacct_rows([job_id], "JobID,State"):
            m = re.match(r"CANCELLED by (\d+)", parts[1]) if len(parts) == 2 and parts[0] == job_id else None
            if m:
                return f"uid {m.group(1)}{_user(int(m.group(1)))}"
        return None

    # ---- what Slurm refuses ---------------------------------------------------------------
    def refused_by_slurm(self, action: str, message: str) -> None:
        if re.search(r"denied|not permitted|permission|privilege", message, re.IGNORECASE):
            self.refusals[action] = f"Slurm refuses {action.replace('_', ' ')} here: {message}"

    def why_not(self, action: str, state: RunState) -> str | None:
        return self.refusals.get(action) or slurm_why_not(action, state)


def _user(uid: int) -> str:
    import pwd

    try:
        return f" {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return ""


def poll_interval(config: BackendConfig) -> float:
    """Seconds between batched status queries: $PERFWATCH_SLURM_POLL, else the campaign's, else DEFAULT_POLL."""
    text = os.environ.get(POLL_ENV, "")
    try:
        value = float(text) if text else None
    except ValueError:
        value = None
    return value if value is not None and value > 0 else (config.poll_interval or DEFAULT_POLL)


def slurm_why_not(action: str, state: RunState) -> str | None:
    """The common rule, except that a job pending in Slurm (STARTING) can be moved up but not suspended."""
    if state is RunState.STARTING:  # submitted, pending in Slurm
        if action in ("pause", "resume"):
            return "the job is still pending in Slurm"
        if action in ("start_now", "stop", "kill"):
            return None
    return why_not(action, state)


def job_ids_in(record: RunRecord) -> list[str]:
    """Every Slurm job a run's entry in perfwatch.json names (earlier attempts first, each job once)."""
    ids = [str(a["slurm_job_id"]) for a in record.attempts if a.get("slurm_job_id")]
    ids += [record.slurm_job_id] if record.slurm_job_id else []
    return list(dict.fromkeys(ids))


__all__ = ["BATCH_SCRIPT", "SlurmBackend", "SlurmCommands", "SlurmRun", "job_ids_in", "sbatch_argv"]
