"""The local backend: each run is a process group on this host (control/process.py).

Control is signals to the whole group: pause SIGSTOP, resume SIGCONT, terminate SIGTERM (+
SIGCONT so a paused group can handle it), kill SIGKILL. Re-adoption is by pid + create time.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import psutil

from perfwatch.core.control import process
from perfwatch.core.control.backends import Launch, why_not
from perfwatch.core.control.campaign import RunSpec
from perfwatch.core.control.registry import RunRecord
from perfwatch.core.control.states import RunState


class LocalRun:
    """A `RunHandle` over a `process.Proc`."""

    def __init__(self, proc: process.Proc) -> None:
        self.proc = proc

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    @property
    def pgid(self) -> int | None:
        return self.proc.pgid

    @property
    def exit_record(self) -> dict | None:
        return self.proc.exit_record

    @property
    def known(self) -> dict[int, float]:
        """Every process seen below the supervisor (pid -> create time), see `process.Proc.track`."""
        return self.proc.known

    @property
    def unknown(self) -> bool:
        return self.proc.unknown

    never_ran = False  # a local run's process exists from its start on

    def poll(self) -> int | None:
        return self.proc.poll()

    def track(self) -> bool:
        return self.proc.track()

    def pending(self) -> str | None:
        return None

    def paused(self) -> bool:
        return self.proc.status() == psutil.STATUS_STOPPED

    def pause(self) -> bool:
        return self.proc.signal(signal.SIGSTOP)

    def resume(self) -> bool:
        return self.proc.signal(signal.SIGCONT)

    def terminate(self) -> bool:
        sent = self.proc.signal(signal.SIGTERM)
        self.proc.signal(signal.SIGCONT)  # a paused group must run to handle SIGTERM
        return sent

    def kill(self) -> bool:
        return self.proc.signal(signal.SIGKILL)

    def start_now(self) -> bool:
        return False  # a local run is running as soon as it has a handle

    def requeued(self) -> str | None:
        return None

    def ended_as(self) -> tuple[RunState | None, str | None]:
        return None, None  # the exit status says it all

    refused: str | None = None  # a signal to our own group is always delivered (or the group is gone)

    def cleanup(self) -> None:
        # only a group we started or verified on adoption (a forged pid is adopted with create_time -1)
        if self.proc.pgid > 1 and self.proc.create_time > 0 and self.proc.group_pids():  # no orphans
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pgid, signal.SIGKILL)
        self.proc.signal_escaped(signal.SIGKILL)  # and none that setsid()'d away from the group

    def facts(self) -> dict[str, Any]:
        return {"pid": self.proc.pid, "pgid": self.proc.pgid, "create_time": self.proc.create_time,
                "descendants": sorted((pid, t) for pid, t in self.proc.known.items())}


class LocalBackend:
    name = "local"
    assigns_devices = True

    def start(self, spec: RunSpec, run_dir: Path, launch: Launch) -> LocalRun:
        return LocalRun(process.start(
            spec.argv, run_dir, env=launch.env, cwd=spec.cwd, cpus=launch.cpus, mem_bytes=launch.mem_bytes,
            cache_clear=spec.cache_clear_cmd, cache_clear_timeout=spec.cache_clear_timeout,
        ))

    def adopt(self, record: RunRecord, run_dir: Path) -> LocalRun | None:
        if not (record.pid and record.create_time):
            return None
        # a registry's pids are not signed: adopt only this run's own supervisor (never pid 1, never a
        # stranger whose pid and create time were copied in); anything else ends `unknown`, unsignalled
        ours = record.pid > 1 and process.runs_for(record.pid, run_dir)
        proc = process.adopt(record.pid, record.create_time if ours else -1.0, run_dir)
        proc.known = {int(pid): float(t) for pid, t in record.descendants
                      if int(pid) > 1 and process.runs_for(int(pid), run_dir)}
        return LocalRun(proc)

    def refresh(self) -> None:
        return None

    def stale(self) -> str | None:
        return None

    def why_not(self, action: str, state: RunState) -> str | None:
        return why_not(action, state)
