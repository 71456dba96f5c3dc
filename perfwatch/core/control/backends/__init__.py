"""Where a campaign's runs execute: local process groups or Slurm jobs, behind one interface.

The `Scheduler` owns the queue, limits and states; a `Backend` only starts a run and hands
back a `RunHandle`, which the scheduler polls and controls (pause, resume, terminate, kill).
Both backends start the same supervisor (`python -m perfwatch.core.control.supervisor`) and
so write the same files into the run's folder (mllog.txt, output.log, exit.json): watching,
reports and packaging do not know which backend ran a run.

A handle's `facts()` go into the run's entry in perfwatch.json; `Backend.adopt` rebuilds a
handle from them, which is how `attach` re-adopts runs after perfwatch died.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from perfwatch.core.control.states import RunState, allowed

if TYPE_CHECKING:  # campaign.py imports this package for BackendConfig
    from perfwatch.core.control.campaign import RunSpec
    from perfwatch.core.control.registry import RunRecord

BACKENDS = ("local", "slurm")


@dataclass(frozen=True)
class BackendConfig:
    """The campaign's `scheduler:` backend keys (validated in campaign.py), as stored in perfwatch.json."""

    backend: str = "local"
    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None
    qos: str | None = None
    sbatch_args: tuple[str, ...] = ()
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    poll_interval: float | None = None  # s between the batched status queries (None: the backend's default)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "partition": self.partition, "account": self.account,
                "time_limit": self.time_limit, "qos": self.qos, "sbatch_args": list(self.sbatch_args),
                "container_image": self.container_image, "container_mounts": list(self.container_mounts),
                "poll_interval": self.poll_interval}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> BackendConfig:
        data = data or {}
        return cls(
            backend=str(data.get("backend") or "local"), partition=data.get("partition"),
            account=data.get("account"), time_limit=data.get("time_limit"), qos=data.get("qos"),
            sbatch_args=tuple(data.get("sbatch_args") or ()), container_image=data.get("container_image"),
            container_mounts=tuple(data.get("container_mounts") or ()),
            poll_interval=float(data["poll_interval"]) if isinstance(data.get("poll_interval"), (int, float)) else None,
        )


class BackendError(RuntimeError):
    """The backend cannot work here at all (e.g. no `sbatch` on PATH): a clear message, not a traceback."""


class TryLater(RuntimeError):
    """The backend cannot start a run now but may soon (slurmctld unreachable): the run waits, queued.

    `retry_in` is the backoff the backend asks for, in seconds; the message says what is awaited.
    """

    def __init__(self, message: str, retry_in: float) -> None:
        super().__init__(message)
        self.retry_in = retry_in


@dataclass
class Launch:
    """What the scheduler decided for one attempt: environment delta and local CPU/memory share."""

    env: dict[str, str]
    cpus: list[int] | None = None
    mem_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class RunHandle(Protocol):
    """One started attempt of a run, as the scheduler sees it."""

    @property
    def pid(self) -> int | None: ...  # local process group leader; None for a Slurm job
    @property
    def pgid(self) -> int | None: ...
    @property
    def exit_record(self) -> dict | None: ...  # exit.json once the run ended
    @property
    def unknown(self) -> bool: ...  # ended, but nothing can say how (no exit.json, no exit status)
    @property
    def never_ran(self) -> bool: ...  # ended before it ever ran (a Slurm job that never got a node): no exit status

    def poll(self) -> int | None: ...  # exit status once ended (-SIG when killed), else None
    def pending(self) -> str | None: ...  # why it has not started yet ("Resources"); None once running
    def paused(self) -> bool: ...
    def pause(self) -> bool: ...
    def resume(self) -> bool: ...
    def terminate(self) -> bool: ...  # ask it to stop (SIGTERM), continuing it first if paused
    def kill(self) -> bool: ...
    def start_now(self) -> bool: ...  # a pending attempt jumps its queue
    def requeued(self) -> str | None: ...  # once per requeue by the backend (Slurm): why; the next attempt waits
    def ended_as(self) -> tuple[RunState | None, str | None]: ...  # the backend's own verdict on the end, words
    @property
    def refused(self) -> str | None: ...  # why the last control action could not be delivered
    def track(self) -> bool: ...  # note its processes for a later take-over; True if that changed
    def cleanup(self) -> None: ...  # after the end: nothing of it left running
    def facts(self) -> dict[str, Any]: ...  # for perfwatch.json; `Backend.adopt` reads them back


class Backend(Protocol):
    name: str
    assigns_devices: bool  # True: the scheduler hands out this host's GPUs/CPUs; False: the backend does

    def start(self, spec: RunSpec, run_dir: Path, launch: Launch) -> RunHandle: ...
    def adopt(self, record: RunRecord, run_dir: Path) -> RunHandle | None: ...
    def refresh(self) -> None: ...  # once per scheduler poll: batch state queries
    def stale(self) -> str | None: ...  # the states shown are old (controller unreachable): since when, why
    def why_not(self, action: str, state: RunState) -> str | None: ...


def why_not(action: str, state: RunState) -> str | None:
    """The common rule (controller.allowed) with a reason a UI can show."""
    return None if allowed(action, state) else f"cannot {action.replace('_', ' ')} a {state} run"

