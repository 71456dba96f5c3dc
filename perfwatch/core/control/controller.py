"""What a UI needs to control runs: states, immutable `ProcInfo`s, the `Controller` protocol.

Two controllers implement it: `Scheduler` (core/control/scheduler.py), the process that owns the
campaign (started by `launch`, or taken over by `attach` when nobody owns it), and
`ClientController` below, used by an `attach` while a detached scheduler is alive: it
reads `perfwatch.json` and sends requests through `LOGDIR/requests/` (one small JSON
file per request, written atomically), which the scheduler executes on its next poll.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from perfwatch.core.control.registry import RunRecord, SchedulerInfo
from perfwatch.core.control.registry import read as read_registry
from perfwatch.core.control.states import ACTIONS, Action, RunState, allowed
from perfwatch.core.ingest.discover import open_regular
from perfwatch.core.ingest.tail import cached_last_lines
from perfwatch.core.layout import (
    OUTPUT_FILE,
    REGISTRY_FILE,
    REQUESTS_DIR,
    request_name,
    run_dir,
    write_json_atomic,
)

__all__ = [
    "ACTIONS", "Action", "ClientController", "Controller", "ProcInfo", "RunState", "action_method", "allowed",
    "describe_pending", "pending_requests", "send_request", "take_requests", "withdraw_request",
]


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcInfo:
    """One run's process facts, immutable: safe to hand to widgets."""

    run_id: str
    job: str
    state: RunState
    pid: int | None
    pgid: int | None
    attempt: int
    exit_code: int | None
    started_at: float | None
    ended_at: float | None
    devices: tuple[int, ...]
    argv: tuple[str, ...]
    folder: Path
    last_output: tuple[str, ...]
    stalled: bool
    reason: str | None


class Controller(Protocol):
    def procs(self) -> Mapping[str, ProcInfo]: ...
    def can(self, action: str, run_id: str) -> bool: ...
    def pause(self, run_id: str) -> None: ...
    def resume(self, run_id: str) -> None: ...
    def stop(self, run_id: str) -> None: ...
    def kill(self, run_id: str) -> None: ...
    def restart(self, run_id: str) -> None: ...
    def start_now(self, run_id: str) -> None: ...
    def stop_all(self) -> None: ...
    def poll(self) -> None: ...
    def close(self, stop_runs: bool) -> None: ...


def action_method(ctl: Controller, action: str) -> Callable[[str], None]:
    """The method of `ctl` that does `action` (an `Action` or its value): the one table from action to
    method. ValueError for a word that is no action."""
    methods: dict[Action, Callable[[str], None]] = {
        Action.PAUSE: ctl.pause, Action.RESUME: ctl.resume, Action.STOP: ctl.stop, Action.KILL: ctl.kill,
        Action.RESTART: ctl.restart, Action.START_NOW: ctl.start_now,
    }
    return methods[Action(action)]


REQUEST_TTL = 30.0  # seconds a request from the TUI stays valid: an owner frozen longer never replays it
MAX_REQUEST_BYTES = 65536  # a request is ~150 bytes


def send_request(logdir: Path, action: str, run_id: str | None, *, ttl: float = REQUEST_TTL) -> Path:
    """Drop a request for the scheduler that owns `logdir` (see module docstring). It names its sender
    (uid, pid) and expires `ttl` seconds from now; `withdraw_request` takes it back while it is pending."""
    folder = _requests_dir(logdir, create=True)
    now = time.time()
    path = folder / request_name(now, uuid.uuid4().hex[:8])
    write_json_atomic(path, {"action": action, "run_id": run_id, "sent_at": now, "expires_at": now + ttl,
                             "uid": os.getuid(), "pid": os.getpid()})
    return path


def withdraw_request(path: Path) -> bool:
    """Take a request back: True if it was still pending (now gone, never executed), False if an owner
    had already taken it."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _requests_dir(logdir: Path, *, create: bool) -> Path:
    """LOGDIR/requests as a real folder: a symlink planted there (to ~/.config, say) would make the
    owner read and delete `*.json` files elsewhere, and a client write there."""
    folder = logdir / REQUESTS_DIR
    if create:
        folder.mkdir(exist_ok=True)
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise OSError(f"{folder} is not a folder (a symlink?)")
    return folder


def pending_requests(logdir: Path) -> list[Path]:
    """The request files waiting in LOGDIR/requests, oldest first (none when it is not a real folder)."""
    try:
        folder = _requests_dir(logdir, create=False)
        return [folder / n for n in sorted(os.listdir(folder)) if n.endswith(".json") and not n.startswith(".")]
    except OSError:
        return []


def _read_request(path: Path) -> tuple[dict | None, int | None]:
    """A request's data and its file's owner; (None, owner) when it is not a small JSON object."""
    try:  # a FIFO or a symlink to /dev/zero named like a request must not hang or flood the owner
        with open_regular(path) as fh:
            owner = os.fstat(fh.fileno()).st_uid
            try:
                data = json.loads(fh.read(MAX_REQUEST_BYTES))
            except ValueError:
                return None, owner
    except OSError:
        return None, None
    return (data if isinstance(data, dict) else None), owner


def request_refusal(data: dict | None, file_owner: int | None, now: float) -> str | None:
    """Why a pending request is not executed (None: it is valid): only this user's own, unexpired requests
    run; one written by another account (a received or shared LOGDIR) is never acted on."""
    if data is None or not isinstance(data.get("action"), str):
        return "not a request"
    me = os.getuid()
    if file_owner != me or data.get("uid") != me:
        return f"written by user id {data.get('uid') if file_owner == me else file_owner}, not by you ({me})"
    expires = data.get("expires_at")
    if not isinstance(expires, (int, float)) or isinstance(expires, bool) or not math.isfinite(expires):
        return "it has no expiry (not sent by this perfwatch)"
    if now > expires:
        return f"it expired {now - expires:.0f}s ago (its sender gave up on it)"
    return None


def describe_request(data: dict | None) -> str:
    if data is None:
        return "(unreadable)"
    return f"{data.get('action')} {data.get('run_id') or 'all runs'}"


def take_requests(logdir: Path) -> list[dict]:
    """Read and delete pending requests, oldest first; return those to execute (see `request_refusal`)."""
    out = []
    now = time.time()
    for path in pending_requests(logdir):
        data, owner = _read_request(path)
        path.unlink(missing_ok=True)
        why = request_refusal(data, owner, now)
        if why is None and data is not None:
            out.append(data)
        else:
            log.warning("dropped request %s (%s): %s", path.name, describe_request(data), why)
    return out


def describe_pending(logdir: Path, *, drop: bool = False) -> list[str]:
    """What each pending request asks and who wrote it; with `drop`, each is deleted unexecuted."""
    out = []
    for path in pending_requests(logdir):
        data, owner = _read_request(path)
        if drop:
            path.unlink(missing_ok=True)
        who = data.get("uid") if isinstance(data, dict) else None
        out.append(f"{describe_request(data)} (file of user id {owner}, sender says user id {who})")
    return out


def info_from_record(rec: RunRecord, logdir: Path) -> ProcInfo:
    """A ProcInfo from one `runs[]` entry of perfwatch.json."""
    folder = run_dir(logdir, rec.run_id)
    state = rec.state
    return ProcInfo(
        run_id=rec.run_id, job=rec.job, state=state, pid=rec.pid, pgid=rec.pgid, attempt=rec.attempt,
        exit_code=rec.exit_code, started_at=rec.started_at, ended_at=rec.ended_at, devices=tuple(rec.devices),
        argv=tuple(rec.argv), folder=folder,
        last_output=cached_last_lines(folder / OUTPUT_FILE) if state is not RunState.QUEUED else (),
        stalled=rec.stalled, reason=rec.reason,
    )


class ClientController:
    """Controls a campaign whose scheduler runs in another process (after `--detach`)."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = Path(logdir)
        self._mtime = -1.0
        self._procs: dict[str, ProcInfo] = {}
        self.send_error: str | None = None  # why the last request could not be written
        self.scheduler: SchedulerInfo | None = None  # the detached owner, as perfwatch.json names it
        self.poll()

    def procs(self) -> Mapping[str, ProcInfo]:
        return self._procs

    def can(self, action: str, run_id: str) -> bool:
        info = self._procs.get(run_id)
        return info is not None and allowed(action, info.state)

    def _send(self, action: str, run_id: str | None) -> None:
        if run_id is None or self.can(action, run_id):
            try:
                send_request(self.logdir, action, run_id)
            except OSError as exc:  # a full disk, a requests/ that is not a folder: the request is lost
                log.warning("cannot send %s to %s: %s", action, self.logdir, exc)
                self.send_error = f"cannot send {action}: {exc.strerror or exc}"

    def pause(self, run_id: str) -> None:
        self._send("pause", run_id)

    def resume(self, run_id: str) -> None:
        self._send("resume", run_id)

    def stop(self, run_id: str) -> None:
        self._send("stop", run_id)

    def kill(self, run_id: str) -> None:
        self._send("kill", run_id)

    def restart(self, run_id: str) -> None:
        self._send("restart", run_id)

    def start_now(self, run_id: str) -> None:
        self._send("start_now", run_id)

    def stop_all(self) -> None:
        self._send("stop_all", None)

    def poll(self) -> None:
        path = self.logdir / REGISTRY_FILE
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return
        if mtime == self._mtime:
            return
        data = read_registry(self.logdir)
        if data is None:
            return  # never half-written; a failed read just means: try again next poll
        self._mtime = mtime
        self.scheduler = data.scheduler
        self._procs = {r.run_id: info_from_record(r, self.logdir) for r in data.runs}

    def close(self, stop_runs: bool) -> None:
        if stop_runs:
            self.stop_all()
