"""Capture the Python stacks of running processes (py-spy) and ask PyTorch's NCCL Flight Recorder to dump.

Used by the hang watchdog once per stall: it only reads other processes (py-spy attaches with ptrace,
reads memory and detaches; the process is paused for a few milliseconds), never signals them. Every
call is bounded in time. py-spy is an optional dependency (`pip install "perfwatch[diagnose]"`); without
it the capture says so and keeps what the ranks' heartbeats tell.

Flight Recorder: a job that set `TORCH_NCCL_TRACE_BUFFER_SIZE` > 0 and `TORCH_NCCL_DEBUG_INFO_PIPE_FILE`
(a prefix) has each rank watch the named pipe `<prefix><rank>`; writing to it makes that rank dump its
ring buffer of collectives to `TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`. perfwatch writes to the pipes
that exist; it never creates them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COLLECTIVE_FRAMES", "ProcessStacks", "dump_stacks", "in_collective", "py_spy", "slurm_step",
           "trigger_flight_recorder"]

PY_SPY_TIMEOUT_S = 20.0
# Python frames that mean "this thread waits in a collective" (torch.distributed and DDP's backward)
COLLECTIVE_FRAMES = (
    "all_reduce", "allreduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "all_to_all",
    "monitored_barrier", "_engine_run_backward", "wait",
)


@dataclass(frozen=True)
class ThreadStack:
    name: str
    frames: tuple[str, ...]  # innermost first: "function (file:line)"
    active: bool | None = None


@dataclass(frozen=True)
class ProcessStacks:
    pid: int
    threads: tuple[ThreadStack, ...] = ()
    error: str | None = None  # why there are no stacks
    extra: Mapping[str, Any] = field(default_factory=dict)

    def main_thread(self) -> ThreadStack | None:
        for t in self.threads:
            if t.name == "MainThread":
                return t
        return self.threads[0] if self.threads else None

    def text(self) -> str:
        if self.error:
            return f"pid {self.pid}: {self.error}"
        out = [f"pid {self.pid}"]
        for t in self.threads:
            out.append(f"  thread {t.name}{' (active)' if t.active else ''}")
            out.extend(f"    {f}" for f in t.frames)
        return "\n".join(out)

    def as_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "error": self.error,
                "threads": [{"name": t.name, "active": t.active, "frames": list(t.frames)} for t in self.threads]}


def py_spy() -> str | None:
    """The py-spy executable, or None."""
    return shutil.which("py-spy")


def slurm_step(job_id: str, node: str) -> list[str]:
    """The argv prefix that runs a command on `node` inside Slurm job `job_id`, beside its own steps."""
    return ["srun", f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}",
            "--quiet"]


def dump_stacks(pid: int, *, timeout_s: float = PY_SPY_TIMEOUT_S, on: list[str] | None = None) -> ProcessStacks:
    """Every thread's Python stack of `pid` (py-spy dump --json), or the reason there is none.
    `on`: an argv prefix that runs py-spy where the process is (`slurm_step`); the same py-spy path is
    used there (a shared software tree, as a Slurm cluster has)."""
    exe = py_spy()
    if exe is None:
        return ProcessStacks(pid, error='py-spy is not installed (pip install "perfwatch[diagnose]")')
    try:
        proc = subprocess.run([*(on or []), exe, "dump", "--json", "--pid", str(int(pid))], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return ProcessStacks(pid, error=f"py-spy did not answer within {timeout_s:g} s")
    except OSError as exc:
        return ProcessStacks(pid, error=f"py-spy could not run: {exc.strerror or exc}")
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        return ProcessStacks(pid, error=f"py-spy failed: {last[-1] if last else 'exit ' + str(proc.returncode)}")
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return ProcessStacks(pid, error="py-spy printed something that is not JSON")
    threads = []
    for t in data if isinstance(data, list) else ():
        if not isinstance(t, dict):
            continue
        frames = tuple(
            f"{f.get('name', '?')} ({f.get('short_filename') or f.get('filename', '?')}:{f.get('line', '?')})"
            for f in t.get("frames") or () if isinstance(f, dict))
        threads.append(ThreadStack(str(t.get("thread_name") or t.get("thread_id")), frames, t.get("active")))
    return ProcessStacks(pid, tuple(threads))


def in_collective(stacks: ProcessStacks) -> bool | None:
    """Whether the main thread waits in a collective (None: no stack to tell)."""
    main = stacks.main_thread()
    if main is None:
        return None
    return any(f.split(" (", 1)[0] in COLLECTIVE_FRAMES for f in main.frames)


def _flight_recorder_env(pid: int) -> dict[str, str]:
    """The Flight Recorder settings in a process's environment (readable for our own user's processes)."""
    try:
        with open(f"/proc/{int(pid)}/environ", "rb") as fh:
            raw = fh.read(1 << 20)
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and (key.startswith(b"TORCH_NCCL_") or key.startswith(b"TORCH_FR_")):
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def trigger_flight_recorder(ranks: Iterable[tuple[int, int]]) -> list[str]:
    """Ask each (rank, pid) whose job enabled the Flight Recorder pipe to dump; returns what was done."""
    done = []
    for rank, pid in ranks:
        env = _flight_recorder_env(pid)
        size = env.get("TORCH_NCCL_TRACE_BUFFER_SIZE") or env.get("TORCH_FR_BUFFER_SIZE") or "0"
        prefix = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
        if not prefix or not size.isdecimal() or int(size) <= 0:
            continue
        pipe = f"{prefix}{rank}.pipe"
        try:
            if not stat.S_ISFIFO(os.stat(pipe).st_mode):
                continue
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        with contextlib.suppress(OSError):
            os.write(fd, b"1\n")
            dump = env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or env.get("TORCH_FR_DUMP_TEMP_FILE") or ""
            done.append(f"rank {rank}: Flight Recorder dump requested ({dump}{rank})")
        os.close(fd)
    return done
