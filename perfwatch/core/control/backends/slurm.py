"""The Slurm backend: each run attempt is one `sbatch` job; control maps to scontrol/scancel.

Submission is an argv list. The batch script is a constant (`BATCH_SCRIPT`): it execs the
Python perfwatch runs in with the in-job runner (`slurm_job.py`) and a JSON file in the run's
folder that holds the workload's argv and environment; no value from the campaign is ever
put into shell text. Inside the job the runner execs the same supervisor a local run has, with
`--output` pointing at the run's output.log, so the run folder looks exactly like a local one.

State comes from one `squeue` call per refresh for all live jobs (`-t all`, so finished jobs
still in the controller's memory are seen); jobs squeue no longer knows are looked up in
`sacct` when accounting is enabled, and otherwise decided by the run's own exit.json.

Control: pause `scontrol suspend`, resume `scontrol resume`, terminate `scancel --full
--signal=TERM` (then the scheduler's grace, then kill), kill `scancel --full --signal=KILL`
(a pending job is simply cancelled), start-now `scontrol top`. What Slurm refused (suspend is
for operators only on most clusters) is remembered and shown as the reason the key is greyed out.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perfwatch.core.control.backends import BackendConfig, BackendError, Launch, why_not
from perfwatch.core.control.campaign import RunSpec
from perfwatch.core.control.process import read_exit
from perfwatch.core.control.registry import RunRecord
from perfwatch.core.control.states import RunState
from perfwatch.core.control.supervisor import signal_number
from perfwatch.core.layout import EXIT_FILE, OUTPUT_FILE, SLURM_BATCH_FILE, SLURM_JOB_FILE, write_json_atomic

BATCH_SCRIPT = '#!/bin/sh\n# perfwatch: the run\'s argv is in the JSON file "$2"\nexec "$1" -m perfwatch.core.control.backends.slurm_job "$2"\n'
PENDING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
LIVE = PENDING | {"RUNNING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "COMPLETING", "STAGE_OUT"}
REFRESH_EVERY = 0.5  # s between squeue calls
EXIT_WAIT = 10.0  # s to wait for exit.json after Slurm says the job ended (shared filesystems lag)
_TIMEOUT = 30


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
        except (OSError, subprocess.TimeoutExpired) as exc:
            return subprocess.CompletedProcess(argv, 255, "", str(exc))


def _exit_code(text: str) -> int | None:
    """Slurm's `ExitCode=3:0` (status:signal) as perfwatch's code: 3, or -SIG when a signal ended it."""
    m = re.match(r"(\d+):(\d+)", text or "")
    if not m:
        return None
    status, sig = int(m.group(1)), int(m.group(2))
    return -sig if sig else status


def job_name(run_id: str) -> str:
    """The Slurm job name of a run: how squeue shows it, and how re-adoption recognises it."""
    return f"perfwatch-{run_id}"


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


class SlurmRun:
    """A `RunHandle` for one Slurm job."""

    def __init__(self, backend: SlurmBackend, job_id: str, run_dir: Path, job_name: str) -> None:
        self.backend, self.job_id, self.run_dir, self.job_name = backend, job_id, run_dir, job_name
        self.exit_record: dict | None = None
        self.returncode: int | None = None
        self._ended_seen: float | None = None
        backend.watch(job_id)

    pid = None
    pgid = None
    unknown = False  # Slurm always knows how a job ended

    def track(self) -> bool:
        return False  # its processes live on the compute nodes, under slurmstepd

    def _state(self) -> tuple[str | None, str]:
        return self.backend.states.get(self.job_id, (None, ""))

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        state, _ = self._state()
        if state in LIVE and state != "COMPLETING":
            return None
        record = read_exit(self.run_dir)
        if record is None and state is None and self.job_id not in self.backend.gone:
            return None  # not looked up yet
        if record is None:
            now = time.monotonic()
            self._ended_seen = self._ended_seen or now
            if now - self._ended_seen < EXIT_WAIT and state != "CANCELLED":
                return None
        code: int | None = None
        if record is not None:
            self.exit_record = record
            if signal_number(record.get("signal")) is not None:
                code = -(signal_number(record.get("signal")) or 0)
            elif record.get("exit_code") is not None:
                code = int(record["exit_code"])
        if code is None:
            code = self.backend.final_exit_code(self.job_id)
        self.returncode = -int(signal.SIGKILL) if code is None else code
        self.backend.unwatch(self.job_id)
        return self.returncode

    def pending(self) -> str | None:
        state, reason = self._state()
        if state is None and self.job_id not in self.backend.gone:
            return "submitted"
        if state not in PENDING:
            return None
        return f"pending in Slurm: {reason}" if reason and reason != "None" else "pending in Slurm"

    def paused(self) -> bool:
        return self._state()[0] in ("SUSPENDED", "STOPPED")

    def _do(self, action: str, argv: list[str]) -> bool:
        name = self.backend.names.get(self.job_id)
        if name is not None and name != self.job_name:  # not the job perfwatch submitted for this run
            return False
        done = self.backend.cmd.run(argv)
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            why = message[-1] if message else f"exit {done.returncode}"
            self.backend.refused_by_slurm(action, why)
            return False
        self.backend.invalidate()
        return True

    def pause(self) -> bool:
        ok = self._do("pause", ["scontrol", "suspend", self.job_id])
        if ok:
            self.backend.states[self.job_id] = ("SUSPENDED", "")
        return ok

    def resume(self) -> bool:
        ok = self._do("resume", ["scontrol", "resume", self.job_id])
        if ok:
            self.backend.states[self.job_id] = ("RUNNING", "")
        return ok

    def terminate(self) -> bool:
        if self.pending():
            return self._do("stop", ["scancel", self.job_id])
        ok = self._do("stop", ["scancel", "--full", "--signal=TERM", self.job_id])
        if self.paused():  # a suspended job must run to handle SIGTERM
            self._do("resume", ["scontrol", "resume", self.job_id])
        return ok

    def kill(self) -> bool:
        if self.pending():
            return self._do("kill", ["scancel", self.job_id])
        return self._do("kill", ["scancel", "--full", "--signal=KILL", self.job_id])

    def start_now(self) -> bool:
        return self._do("start_now", ["scontrol", "top", self.job_id])

    def cleanup(self) -> None:
        if self._state()[0] in LIVE:  # the runner ended but the allocation lingers: end it
            self.backend.cmd.run(["scancel", self.job_id])

    def facts(self) -> dict[str, Any]:
        return {"slurm_job_id": self.job_id, "pid": None, "pgid": None, "create_time": None}


class SlurmBackend:
    """Submits runs with sbatch and keeps one batched view of their Slurm states."""

    name = "slurm"
    assigns_devices = False

    def __init__(self, config: BackendConfig, commands: SlurmCommands | None = None) -> None:
        self.config = config
        self.cmd = commands or SlurmCommands()
        self.states: dict[str, tuple[str | None, str]] = {}  # job id -> (state, reason)
        self.names: dict[str, str] = {}  # job id -> Slurm job name, as squeue reports it
        self.gone: set[str] = set()  # job ids neither squeue nor sacct knows any more
        self._watched: set[str] = set()
        self._refreshed = 0.0
        self.refusals: dict[str, str] = {}

    # ---- submission ---------------------------------------------------------------
    def start(self, spec: RunSpec, run_dir: Path, launch: Launch) -> SlurmRun:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / EXIT_FILE).unlink(missing_ok=True)
        env = {k: v for k, v in launch.env.items() if k != "CUDA_VISIBLE_DEVICES"}  # Slurm sets it from --gres
        job = {
            "run_id": spec.run_id, "argv": list(spec.argv), "env": env, "cwd": spec.cwd,
            "exit_file": str(run_dir / EXIT_FILE), "nnodes": spec.launcher.nnodes,
            "launcher": spec.launcher.type, "container_image": self.config.container_image,
            "container_mounts": list(self.config.container_mounts),
            "cache_clear": list(spec.cache_clear_cmd) if spec.cache_clear_cmd else None,
            "cache_clear_timeout": spec.cache_clear_timeout, "planned_python": sys.executable,
        }
        write_json_atomic(run_dir / SLURM_JOB_FILE, job)
        script = run_dir / SLURM_BATCH_FILE
        script.write_text(BATCH_SCRIPT)
        argv = [*sbatch_argv(self.config, spec, run_dir), str(script), sys.executable, str(run_dir / SLURM_JOB_FILE)]
        done = self.cmd.run(argv)
        job_id = done.stdout.strip().split(";")[0] if done.returncode == 0 else ""
        if not job_id.isdigit():
            why = (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
            raise OSError(f"sbatch refused the job: {why}")
        self.states[job_id] = (None, "")
        self._refreshed = 0.0
        return SlurmRun(self, job_id, run_dir, job_name(spec.run_id))

    def adopt(self, record: RunRecord, run_dir: Path) -> SlurmRun | None:
        job_id = record.slurm_job_id or ""
        return SlurmRun(self, job_id, run_dir, job_name(record.run_id)) if job_id.isdigit() else None

    # ---- state ----------------------------------------------------------------------
    def watch(self, job_id: str) -> None:
        self._watched.add(job_id)
        self._refreshed = 0.0

    def unwatch(self, job_id: str) -> None:
        self._watched.discard(job_id)

    def invalidate(self) -> None:
        self._refreshed = 0.0

    def refresh(self) -> None:
        """One squeue for every watched job (sacct for those squeue forgot), at most every REFRESH_EVERY s."""
        now = time.monotonic()
        if not self._watched or now - self._refreshed < REFRESH_EVERY:
            return
        self._refreshed = now
        ids = sorted(self._watched)
        done = self.cmd.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%r|%j"])
        if done.returncode != 0 and "Invalid job id" not in done.stderr:
            return  # the controller did not answer: keep the last known states
        seen: dict[str, tuple[str | None, str]] = {}
        for line in done.stdout.splitlines():
            parts = line.strip().split("|", 3)
            if len(parts) == 4 and parts[0] in self._watched:
                seen[parts[0]] = (parts[1], parts[2])
                self.names[parts[0]] = parts[3]
        missing = [i for i in ids if i not in seen]
        if missing:
            seen.update(self._sacct(missing))
        for job_id in ids:
            if job_id in seen:
                self.states[job_id] = seen[job_id]
            else:
                self.states[job_id] = (None, "")
                self.gone.add(job_id)

    def _sacct(self, ids: list[str]) -> dict[str, tuple[str | None, str]]:
        if not self.cmd.sacct:
            return {}
        done = self.cmd.run(["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", "JobID,State,ExitCode"])
        out: dict[str, tuple[str | None, str]] = {}
        if done.returncode != 0:
            return out
        for line in done.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3 and parts[0] in ids:
                out[parts[0]] = (parts[1].split()[0], parts[2])  # "CANCELLED by 0" -> CANCELLED
        return out

    def final_exit_code(self, job_id: str) -> int | None:
        """Slurm's own exit code for an ended job without an exit.json (scontrol, then sacct)."""
        done = self.cmd.run(["scontrol", "show", "job", "-o", job_id])
        m = re.search(r"\bExitCode=(\S+)", done.stdout)
        if done.returncode == 0 and m:
            return _exit_code(m.group(1))
        state = self.states.get(job_id, (None, ""))
        return _exit_code(state[1]) if state[0] and ":" in state[1] else None

    # ---- what Slurm refuses ---------------------------------------------------------------
    def refused_by_slurm(self, action: str, message: str) -> None:
        if re.search(r"denied|not permitted|permission|privilege", message, re.IGNORECASE):
            self.refusals[action] = f"Slurm refuses {action.replace('_', ' ')} here: {message}"

    def why_not(self, action: str, state: RunState) -> str | None:
        return self.refusals.get(action) or slurm_why_not(action, state)


def slurm_why_not(action: str, state: RunState) -> str | None:
    """The common rule, except that a job pending in Slurm (STARTING) can be moved up but not suspended."""
    if state is RunState.STARTING:  # submitted, pending in Slurm
        if action in ("pause", "resume"):
            return "the job is still pending in Slurm"
        if action in ("start_now", "stop", "kill"):
            return None
    return why_not(action, state)


def job_ids_in(record: RunRecord) -> list[str]:
    """Every Slurm job a run's entry in perfwatch.json names (earlier attempts first)."""
    ids = [str(a["slurm_job_id"]) for a in record.attempts if a.get("slurm_job_id")]
    return ids + ([record.slurm_job_id] if record.slurm_job_id else [])


__all__ = ["BATCH_SCRIPT", "SlurmBackend", "SlurmCommands", "SlurmRun", "job_ids_in", "sbatch_argv"]
