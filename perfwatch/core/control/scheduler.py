"""The campaign owner: queue, devices, concurrency, timeouts, stalls, exit at target.

`Scheduler` implements `control.Controller`. It is driven by `poll()` (2-4 Hz) from one
thread: it reaps exits, executes requests from `LOGDIR/requests/`, enforces limits and
starts queued runs, and rewrites `perfwatch.json` whenever a run changes state. It keeps
no state that is not in that file, so a new perfwatch (`attach`) can take over a campaign
whose owner died: live runs are re-adopted by pid + create time, finished ones are read
from their `exit.json`, queued ones start as if nothing had happened.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from perfwatch.core.control import process as launch
from perfwatch.core.control import registry, trust
from perfwatch.core.control.backends import Backend, BackendConfig, Launch, RunHandle, TryLater
from perfwatch.core.control.backends.local import LocalRun
from perfwatch.core.control.campaign import Campaign, RunSpec
from perfwatch.core.control.controller import (
    ProcInfo,
    RunState,
    action_method,
    describe_pending,
    take_requests,
)
from perfwatch.core.control.paths import UnsafePath, run_folder
from perfwatch.core.control.states import ACTIONS, refused
from perfwatch.core.ingest.tail import cached_last_lines
from perfwatch.core.layout import MLLOG_FILE, OUTPUT_FILE, REGISTRY_FILE, run_dir
from perfwatch.core.telemetry import ranks


def storage_problem(exc: OSError) -> str:
    """An OSError from writing under LOGDIR, in words a user acts on."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "LOGDIR's file system is full"
    if exc.errno == errno.EROFS:
        return "LOGDIR's file system is read-only"
    return exc.strerror or str(exc)


log = logging.getLogger(__name__)

TRACK_EVERY = 1.0  # s between snapshots of a live run's process tree
RANKS_EVERY = 2.0  # s between two looks at a run's rank files (the hang watchdog)
AT_TARGET_GRACE = 3.0  # s a workload gets to stop by itself after its log says target reached


def make_backend(config: BackendConfig) -> Backend:
    """The backend a campaign asked for; raises `BackendError` when it cannot work on this machine."""
    if config.backend == "slurm":
        from perfwatch.core.control.backends.slurm import SlurmBackend

        return SlurmBackend(config)
    from perfwatch.core.control.backends.local import LocalBackend

    return LocalBackend()


@dataclass
class _Run:
    spec: RunSpec
    record: registry.RunRecord  # this run in perfwatch.json, updated in place by _write
    state: RunState = RunState.QUEUED
    proc: RunHandle | None = None  # the backend's handle on the current attempt
    attempt: int = 1
    exit_code: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    devices: tuple[int, ...] = ()
    slot: int | None = None
    stalled: bool = False
    reason: str | None = None
    intent: RunState | None = None  # the state an exit means, when we caused it
    kill_at: float | None = None
    paused_at: float | None = None
    paused_total: float = 0.0
    activity: tuple[float, ...] = ()
    active_at: float = 0.0
    target_seen_at: float | None = None
    priority: bool = False
    tracked_at: float = 0.0
    ranks_at: float = 0.0  # when its rank files are next read
    rank_timed: bool = False  # it writes rank files: the hang watchdog judges it by its steps
    capture: threading.Thread | None = None  # the current stall's stack capture
    captured: bool = False  # ... finished, and `on_stall` was acted on
    restart_on_end: bool = False  # on_stall: restart, once the stalled attempt has ended
    retry_at: float = 0.0  # the backend asked to try starting it again no sooner (TryLater)
    stale_shown: bool = False  # its reason is the backend's "status stale" note
    refused_stale: bool = False  # its reason is a control refused because the backend's status was stale
    requeued_note: str | None = None  # why its job is pending again (Slurm requeued it): shown until it runs


def exit_state(code: int, *, unknown: bool, intent: RunState | None, reason: str | None,
               cache_clear: object = None, ended_as: tuple[RunState | None, str | None] = (None, None),
               never_ran: bool = False) -> tuple[RunState, str | None]:
    """The state an ended attempt is in, and why: from its exit status (`-SIG` when signalled; `unknown`:
    nothing says how it ended), what perfwatch meant by stopping it (`intent`, with the `reason` it gave),
    its cache clear's failure, and the backend's own record of the end (`ended_as`: Slurm's final state
    as a perfwatch state, or None to let the exit status decide, and Slurm's words, always shown;
    `never_ran`: the backend ended it before it ever ran, so `code` is no exit status).
    The scheduler records it; `report` applies it to runs that ended while no scheduler watched."""
    what = launch.describe_exit(code)
    verdict, words = ended_as
    said = f"; {words}" if words else ""
    if unknown:
        what = "exit status unknown: no exit.json (it could not be written, or its supervisor was killed)"
    if never_ran:
        what = "the job never started"
    if unknown and intent is None and verdict is None:
        return RunState.UNKNOWN, what
    if intent is None and isinstance(cache_clear, dict) and cache_clear.get("reason"):
        return RunState.FAILED, str(cache_clear["reason"])
    if intent is RunState.SUCCEEDED:
        return RunState.SUCCEEDED, f"{reason}{said}"
    if intent is not None:
        return intent, f"{reason} ({what}{said})"
    if verdict is not None:
        return verdict, f"{words} ({what})"
    if code == 0:
        return RunState.SUCCEEDED, words
    return (RunState.FAILED if code > 0 else RunState.KILLED), f"{what}{said}"


class Untrusted(Exception):
    """A registry this user did not sign on this host (see `trust`): watch it, never run its plan."""

    def __init__(self, reason: str, data: dict, *, changed: bool = False) -> None:  # data: perfwatch.json as read
        super().__init__(reason)
        self.reason, self.data, self.changed = reason, data, changed


def _cost(spec: RunSpec) -> int:
    """CPU threads a run uses: its `threads` times its processes (torchrun nproc_per_node)."""
    return spec.threads * spec.launcher.nproc_per_node


def planned_devices(runs: Sequence[RunSpec], gpus: Sequence[int], max_parallel: int | None = None) -> dict[str, str]:
    """Per run, the devices the plan announces: `cpu`, `gpu 0`, `gpus 0,1`, or, for a run that must
    wait for GPUs to free up, `gpu: first free of 0,1`. Mirrors `_start` for the runs that start at once."""
    free = list(gpus)
    started = 0
    out: dict[str, str] = {}
    for spec in runs:
        room = max_parallel is None or started < max_parallel
        if not spec.devices:
            out[spec.run_id] = "cpu"
        elif room and len(free) >= spec.devices:
            mine, free = free[: spec.devices], free[spec.devices:]
            out[spec.run_id] = ("gpu " if len(mine) == 1 else "gpus ") + ",".join(map(str, mine))
        else:
            n = "" if spec.devices == 1 else f"{spec.devices} "
            out[spec.run_id] = f"gpu: first {n}free of {','.join(map(str, gpus))}"
            continue
        started += 1
    return out


class Scheduler:
    """Owns a campaign's runs (see module docstring); one per LOGDIR, guarded by a lock."""

    def __init__(self, logdir: Path, data: registry.Registry, lock_fd: int, *,
                 target_reached: Callable[[str, int], bool] | None = None, gpus: tuple[int, ...] | None = None,
                 backend: Backend | None = None) -> None:
        self.logdir = Path(logdir).resolve()  # runs get absolute paths whatever their cwd
        self.data = data
        self.backend = backend or make_backend(BackendConfig.from_dict(data.backend))
        self.hold_queue = False  # True: start no queued run (a `perfwatch control` acting without an owner)
        self.dropped_requests: list[str] = []  # requests found at a confirmed take-over, deleted unexecuted
        self._lock_fd: int | None = lock_fd
        self.target_reached = target_reached
        self.gpus = tuple(data.gpus) if data.gpus is not None else (gpus if gpus is not None else launch.detect_gpus())
        self.runs: dict[str, _Run] = {}
        self.events: deque[tuple[str, RunState, str | None]] = deque(maxlen=1000)
        self._dirty = True
        self.write_error: str | None = None  # why perfwatch.json could not be written (retried every poll)
        self._telemetry: Any = None  # TelemetryThread once record_telemetry() is called
        self._live: Mapping[str, Any] = {}
        adopted: list[_Run] = []  # live runs the backend re-adopted by their facts in perfwatch.json
        for rec in data.runs:
            self.runs[rec.run_id] = self._restore(rec, adopted)
        if adopted:
            self.backend.refresh()  # one batched state query for all of them (Slurm: one squeue)
        for run in adopted:
            self._adopted(run)
        specs = [r.spec for r in self.runs.values()]
        self.cores = len(os.sched_getaffinity(0))
        # auto: GPU runs are limited by free GPUs; CPU runs by a budget of cores (threads x processes)
        self.cpu_budget = data.max_parallel is None
        cpu_specs = [s for s in specs if not s.devices]
        threads = min((_cost(s) for s in cpu_specs), default=1)
        auto = (len(self.gpus) if any(s.devices for s in specs) else 0) + (max(1, self.cores // threads) if cpu_specs else 0)
        if not self.backend.assigns_devices:  # e.g. Slurm: every run is submitted, the cluster queues them
            self.cpu_budget, auto = False, len(specs)
        self.max_parallel = int(data.max_parallel or max(1, auto))
        data.scheduler = registry.SchedulerInfo(pid=os.getpid(), create_time=psutil.Process().create_time(),
                                                host=socket.gethostname(), since=time.time(),
                                                max_parallel=self.max_parallel)
        self._write()

    # ---- construction ------------------------------------------------------------
    @classmethod
    def create(cls, campaign: Campaign, logdir: Path, *, target_reached: Callable[[str, int], bool] | None = None,
               gpus: tuple[int, ...] | None = None) -> Scheduler:
        """A new LOGDIR for `campaign`; fails if the folder already holds a campaign."""
        backend = make_backend(campaign.backend)  # BackendError (e.g. no sbatch) before anything is created
        logdir.mkdir(parents=True, exist_ok=True)
        if (logdir / REGISTRY_FILE).exists():
            raise FileExistsError(f"{logdir} already holds a campaign; use `perfwatch attach {logdir}`")
        fd = registry.try_lock(logdir)
        if fd is None:
            raise RuntimeError(f"{logdir} is owned by another perfwatch")
        made = cls(logdir, registry.new_registry(campaign, logdir), fd, target_reached=target_reached, gpus=gpus,
                   backend=backend)
        if made.write_error is not None:  # no plan on disk: nothing could be re-adopted, start nothing
            problem = made.write_error
            made.close(stop_runs=False)
            (logdir / REGISTRY_FILE).unlink(missing_ok=True)
            raise OSError(f"cannot write {logdir / REGISTRY_FILE}: {problem}")
        return made

    @classmethod
    def take_over(cls, logdir: Path, *, target_reached: Callable[[str, int], bool] | None = None,
                  gpus: tuple[int, ...] | None = None, confirm: str | None = None) -> Scheduler | None:
        """Own an existing campaign whose scheduler is gone; None if it is still alive.

        Only a plan this user signed on this host is taken over silently; any other raises
        `Untrusted` unless `confirm` is the plan's short digest (`attach --take-over`), in which
        case this user signs it. `registry.RegistryError` when perfwatch.json is unreadable or unsafe.
        """
        if registry.load(logdir) is None:
            return None
        fd = registry.try_lock(logdir)
        if fd is None:
            return None
        try:
            raw = registry.load_raw(logdir)  # re-read under the lock: this is the plan that will run
            if raw is None:
                raise registry.RegistryError(f"{logdir}: perfwatch.json disappeared")
            reason = trust.untrusted_reason(raw)  # the plain data as written is what was signed
            if reason is not None and confirm != trust.short_digest(raw):
                raise Untrusted(reason, raw, changed=confirm is not None)
            data = registry.decode(raw)
            if data is None:
                raise registry.RegistryError(f"{logdir}: perfwatch.json has fields of the wrong type")
            registry.sign(data)  # this user's plan (verified or confirmed), signed as it will now be written
            # a confirmed plan is the plan and nothing else: requests waiting in the folder were not part of
            # what the user confirmed (`attach --take-over` lists them as dropped), so none is executed
            dropped = describe_pending(logdir, drop=True) if reason is not None else []
            owner = cls(logdir, data, fd, target_reached=target_reached, gpus=gpus)
            owner.dropped_requests = dropped
            return owner
        except BaseException:
            os.close(fd)
            raise

    def _restore(self, rec: registry.RunRecord, adopted: list[_Run]) -> _Run:
        run = _Run(rec.spec(), rec)
        run.attempt = rec.attempt
        run.exit_code, run.reason = rec.exit_code, rec.reason
        run.started_at, run.ended_at = rec.started_at, rec.ended_at
        run.devices = tuple(rec.devices)
        run.paused_total = rec.paused_total
        run.paused_at, run.slot = rec.paused_at, rec.slot
        state = rec.state
        try:
            folder = self._folder(run.spec.run_id)
        except UnsafePath as exc:
            run.state, run.reason = RunState.UNKNOWN, f"not adopted: {exc}"
            return run
        handle = self.backend.adopt(rec, folder) if state.alive else None
        if handle is not None:
            run.proc = handle
            run.intent = rec.intent
            run.state = RunState.RUNNING  # `_adopted` decides, once the backend has been asked about all
            adopted.append(run)
        elif state is RunState.STARTING:  # perfwatch died between "starting" and recording the pid
            found = launch.find_supervisor(folder)
            if found is not None:
                run.proc = LocalRun(launch.adopt(*found, folder))
                run.state, run.active_at = RunState.RUNNING, time.time()
            elif isinstance((record := launch.read_exit(folder) or {}).get("runner_pid"), int):
                run.proc = LocalRun(launch.adopt(record["runner_pid"], 0.0, folder))  # ended meanwhile: poll() reads exit.json
                run.state = RunState.RUNNING
            else:
                run.state = RunState.UNKNOWN  # it may have run: never start it twice
                run.reason = "perfwatch stopped while starting it; not started again (restart it to run it)"
        elif state.alive:
            run.state = RunState.QUEUED  # never got a process: start it again
        else:
            run.state = state
        return run

    def _adopted(self, run: _Run) -> None:
        """A re-adopted run's state from its handle (after one `backend.refresh()` for all of them)."""
        assert run.proc is not None
        run.state = RunState.PAUSED if run.proc.paused() else RunState.RUNNING
        if run.proc.pending():
            run.state, run.reason = RunState.STARTING, run.proc.pending()
        if run.record.state is RunState.STOPPING:
            run.state, run.kill_at = RunState.STOPPING, time.time() + run.spec.grace
        run.active_at = time.time()

    def _folder(self, run_id: str) -> Path:
        """The run's folder; UnsafePath if it would lie outside LOGDIR (checked at every use)."""
        return run_folder(self.logdir, run_id)

    # ---- Controller --------------------------------------------------------------
    def procs(self) -> Mapping[str, ProcInfo]:
        return {rid: self._info(r) for rid, r in self.runs.items()}

    def _info(self, r: _Run) -> ProcInfo:
        folder = run_dir(self.logdir, r.spec.run_id)
        return ProcInfo(
            run_id=r.spec.run_id, job=r.spec.job, state=r.state, pid=r.proc.pid if r.proc else None,
            pgid=r.proc.pgid if r.proc else None, attempt=r.attempt, exit_code=r.exit_code,
            started_at=r.started_at, ended_at=r.ended_at, devices=r.devices, argv=r.spec.argv, folder=folder,
            last_output=cached_last_lines(folder / OUTPUT_FILE) if r.state is not RunState.QUEUED else (),
            stalled=r.stalled, reason=r.reason,
        )

    def can(self, action: str, run_id: str) -> bool:
        return self.why_not(action, run_id) is None

    def why_not(self, action: str, run_id: str) -> str | None:
        """Why `action` does not apply to the run now (shown next to a greyed-out key); None if it does."""
        run = self.runs.get(run_id)
        if run is None:
            return f"no run {run_id!r}"
        return self.backend.why_not(action, run.state)

    def pause(self, run_id: str) -> None:
        run = self.runs[run_id]
        if not (self.can("pause", run_id) and run.proc):
            return
        if run.proc.pause():
            run.paused_at = time.time()
            self._set(run, RunState.PAUSED, "paused")
        else:
            self._refused(run, "pause")

    def resume(self, run_id: str) -> None:
        run = self.runs[run_id]
        if not (self.can("resume", run_id) and run.proc):
            return
        if run.proc.resume():
            now = time.time()
            run.paused_total += now - (run.paused_at or now)
            run.paused_at, run.active_at = None, now
            self._set(run, RunState.RUNNING, None)
        else:
            self._refused(run, "resume")

    def _refused(self, run: _Run, action: str) -> None:
        """The backend would not or could not do `action` (Slurm: suspend is for operators; slurmctld
        unreachable): say why on the run. Nothing is retried: a later attempt is the user's to make."""
        why = (run.proc.refused if run.proc else None) or self.backend.why_not(action, run.state)
        if why:
            run.stale_shown = False  # the refusal stays on the run (it says why) while the outage lasts
            run.refused_stale = self.backend.stale() is not None
            self._set(run, run.state, refused(action, why))

    def stop(self, run_id: str, *, intent: RunState = RunState.STOPPED, reason: str = "stopped by user") -> None:
        run = self.runs[run_id]
        if not self.can("stop", run_id):
            return
        if run.state is RunState.QUEUED:
            self._set(run, RunState.STOPPED, "cancelled before it started")
            return
        before = (run.state, run.reason, run.intent)
        run.intent, run.kill_at = intent, time.time() + run.spec.grace
        self._set(run, RunState.STOPPING, reason)
        if run.proc and not run.proc.terminate() and run.proc.refused:  # not delivered: nothing changed
            run.state, run.reason, run.intent = before
            run.kill_at = None
            if run.reason != refused("stop", run.proc.refused):
                self._refused(run, "stop")

    def kill(self, run_id: str) -> None:
        run = self.runs[run_id]
        if self.can("kill", run_id) and run.proc:
            before = (run.state, run.reason, run.intent, run.kill_at)
            run.intent, run.kill_at = run.intent or RunState.KILLED, None
            self._set(run, RunState.STOPPING, run.reason if run.state is RunState.STOPPING else "killed by user")
            if not run.proc.kill() and run.proc.refused:  # not delivered: nothing changed
                run.state, run.reason, run.intent, run.kill_at = before
                self._refused(run, "kill")

    def restart(self, run_id: str) -> None:
        """A new attempt; the earlier attempt's files are kept as `.attempt-N.*` in the run folder."""
        run = self.runs[run_id]
        if not self.can("restart", run_id):
            return
        try:
            launch.archive_attempt(self._folder(run_id), run.attempt)
        except (UnsafePath, OSError) as exc:
            self._set(run, run.state, f"cannot restart: {exc}")
            return
        self._next_attempt(run, str(run.state))
        run.proc, run.priority = None, True
        self._set(run, RunState.QUEUED, f"restart: attempt {run.attempt}")

    def _next_attempt(self, run: _Run, how: str) -> None:
        """Note the current attempt in the run's `attempts` (`how` it ended) and count the next one."""
        earlier = {"attempt": run.attempt, "state": how, "exit_code": run.exit_code, "reason": run.reason,
                   "started_at": run.started_at, "ended_at": run.ended_at,
                   **{k: v for k, v in (run.proc.facts() if run.proc else {}).items() if k != "descendants"}}
        run.record.attempts.append(earlier)
        run.attempt += 1
        run.exit_code, run.started_at, run.ended_at = None, None, None
        run.intent, run.stalled, run.target_seen_at, run.paused_total = None, False, None, 0.0
        run.rank_timed, run.ranks_at, run.capture, run.captured = False, 0.0, None, False
        run.paused_at, run.kill_at = None, None

    def _requeued(self, run: _Run, why: str) -> None:
        """The backend put the run's job back in its queue (Slurm requeue, preemption): same run, next
        attempt, waiting again. The ending attempt's files are kept as `.attempt-N.*`, unless the next
        attempt is already running (the requeue happened while no perfwatch watched): then both
        attempts' output stays in the run's files, and the reason says so."""
        assert run.proc is not None
        if run.proc.pending() is None:
            why = f"{why}; seen after the next attempt started: both attempts' output is in the run's files"
        else:
            try:
                launch.archive_attempt(self._folder(run.spec.run_id), run.attempt)
            except (UnsafePath, OSError) as exc:
                why = f"{why}; its files could not be kept apart: {exc}"
        run.ended_at = time.time()
        self._next_attempt(run, "requeued")
        run.requeued_note = why
        self._set(run, RunState.STARTING, f"{why}; {run.proc.pending() or 'waiting in Slurm'}")

    def start_now(self, run_id: str) -> None:
        run = self.runs[run_id]
        if not self.can("start_now", run_id):
            return
        if run.state is RunState.STARTING and run.proc is not None:
            run.proc.start_now()  # pending in the backend's queue (Slurm: scontrol top)
        else:
            self._start(run)

    def stop_all(self) -> None:
        for rid in self.runs:
            self.stop(rid)

    @property
    def done(self) -> bool:
        return all(r.state.terminal for r in self.runs.values())

    def record_telemetry(self, interval: float = 1.0) -> None:
        """Append each live run's GPU/host share to LOGDIR/<run>/telemetry.jsonl every `interval` s.

        Only the owner of the campaign records (one writer per file); the sampling thread reads
        `_live`, an immutable mapping that `poll()` replaces, never the scheduler's own state.
        """
        if self._telemetry is not None:
            return
        from perfwatch.core.telemetry.sampling import TelemetryThread, default_sampler

        self._telemetry = TelemetryThread(default_sampler(), interval=interval, runs=lambda: self._live)
        self._telemetry.start()

    @property
    def telemetry(self) -> Any:
        """The recording TelemetryThread (None until `record_telemetry`): a live view subscribes to its samples
        instead of sampling the devices a second time."""
        return self._telemetry

    def poll(self) -> None:
        for req in take_requests(self.logdir):
            self._request(req)
        now = time.time()
        self.backend.refresh()
        self._show_stale(self.backend.stale())
        for run in self.runs.values():
            if run.proc is not None and run.state.alive:
                self._watch(run, now)
        self._fill(now)
        if self._telemetry is not None:
            from perfwatch.core.telemetry.sampling import resources_from_procs

            self._live = resources_from_procs(self.procs())
        if self._dirty:
            self._write()

    def close(self, stop_runs: bool) -> None:
        """Give the campaign up: optionally stop every run (escalating), then drop the lock."""
        if stop_runs:
            self.stop_all()
            deadline = time.time() + max((r.spec.grace for r in self.runs.values()), default=0) + 5
            while any(r.state.alive for r in self.runs.values()) and time.time() < deadline:
                self.poll()
                time.sleep(0.05)
        if self._telemetry is not None:
            self._telemetry.stop()
            self._telemetry = None
        self.data.scheduler = None
        self._write()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- internals ---------------------------------------------------------------
    def _show_stale(self, stale: str | None) -> None:
        """While the backend cannot say what its runs do, every live run says so (and how long)."""
        for run in self.runs.values():
            if run.proc is None or run.state not in (RunState.STARTING, RunState.RUNNING, RunState.PAUSED):
                continue
            if stale is not None and (run.stale_shown or run.reason is None or run.state is RunState.STARTING):
                if run.reason != stale:
                    run.stale_shown = True
                    self._set(run, run.state, stale)
            elif stale is None and (run.stale_shown or run.refused_stale):
                run.stale_shown = run.refused_stale = False
                self._set(run, run.state, None)

    def _request(self, req: dict) -> None:
        action, run_id = req.get("action"), req.get("run_id")
        if action == "stop_all":
            self.stop_all()
        elif action in ACTIONS and run_id in self.runs:
            action_method(self, action)(run_id)

    def _watch(self, run: _Run, now: float) -> None:
        assert run.proc is not None
        code = run.proc.poll()
        if code is not None:
            self._finish(run, code, now)
            return
        requeued = run.proc.requeued()
        if requeued is not None:
            self._requeued(run, requeued)
            return
        if run.state is RunState.STARTING:
            pending = run.proc.pending()
            if pending is None:  # the backend started it: limits count from now
                run.started_at = run.active_at = now
                run.requeued_note = None
                self._set(run, RunState.RUNNING, None)
                return
            shown = f"{run.requeued_note}; {pending}" if run.requeued_note else pending  # a requeue stays said
            if shown != run.reason and not run.stale_shown and not (run.reason or "").endswith(shown):
                self._set(run, RunState.STARTING, shown)
            return
        if now - run.tracked_at >= TRACK_EVERY:  # the run's process tree, on disk for a take-over
            run.tracked_at = now
            if run.proc.track():
                self._dirty = True
        if run.state is RunState.STOPPING:
            if run.kill_at is not None and now >= run.kill_at:
                run.kill_at = None
                note = f"no exit {run.spec.grace:g}s after SIGTERM: SIGKILL"
                if note not in (run.reason or ""):  # a taken-over campaign escalates once, says it once
                    run.reason = f"{run.reason}; {note}"
                if not run.proc.kill() and run.proc.refused:
                    run.kill_at = now + run.spec.grace  # the backend could not deliver it: try again later
                self._dirty = True
            return
        if run.state is RunState.PAUSED:
            return
        spec = run.spec
        elapsed = now - (run.started_at or now) - run.paused_total
        if spec.timeout is not None and elapsed > spec.timeout:
            self.stop(spec.run_id, intent=RunState.TIMEOUT, reason=f"timeout after {spec.timeout:g}s")
            return
        if spec.exit_at_target and self.target_reached is not None and self.target_reached(spec.run_id, run.attempt):
            run.target_seen_at = run.target_seen_at or now
            if now - run.target_seen_at >= AT_TARGET_GRACE:
                self.stop(spec.run_id, intent=RunState.SUCCEEDED, reason="target reached; stopped by perfwatch")
                return
        if now >= run.ranks_at:
            run.ranks_at = now + RANKS_EVERY
            self._watch_ranks(run)
        if spec.stall_after is not None and not run.rank_timed:
            sig = launch.activity(run_dir(self.logdir, run.spec.run_id))
            if sig != run.activity:
                run.activity, run.active_at = sig, now
                if run.stalled:
                    run.stalled = False
                    self._set(run, RunState.RUNNING, None)
            elif not run.stalled and now - run.active_at > spec.stall_after:
                run.stalled = True
                self._set(run, RunState.STALLED, f"no output for {spec.stall_after:g}s")

    def _watch_ranks(self, run: _Run) -> None:
        """The hang watchdog for a run that writes rank files: stalled when its steps stop for longer
        than its own rhythm allows (core/telemetry/ranks.py); every rank's stacks captured once."""
        folder = run_dir(self.logdir, run.spec.run_id)
        stats = ranks.rank_stats(ranks.read_rank_files(folder), time.time())
        if not stats:
            return
        run.rank_timed = True
        floor = run.spec.stall_after if run.spec.stall_after is not None else ranks.STALL_FLOOR_S
        if run.capture is not None and not run.capture.is_alive() and not run.captured:
            run.captured = True
            self._after_capture(run)
        verdict = ranks.run_stall(stats, time.time(), factor=run.spec.stall_factor, floor_s=floor)
        if verdict.stalled and not run.stalled:
            run.stalled = True
            self._set(run, RunState.STALLED, verdict.why)
            host = socket.gethostname()
            job = (run.proc.facts() if run.proc else {}).get("slurm_job_id")  # Slurm: a step reaches its nodes
            run.capture = threading.Thread(target=self._capture, args=(folder, stats, verdict, host, job),
                                           name=f"perfwatch-stacks-{run.spec.run_id}", daemon=True)
            run.captured = False
            run.capture.start()
        elif run.stalled and not verdict.stalled:
            run.stalled = False
            self._set(run, RunState.RUNNING, None)

    def _after_capture(self, run: _Run) -> None:
        """`on_stall: stop|restart`: end the stalled attempt once its stacks are kept."""
        if run.spec.on_stall == "capture" or not run.stalled:
            return
        run.restart_on_end = run.spec.on_stall == "restart"
        self.stop(run.spec.run_id, intent=RunState.FAILED,
                  reason=f"{run.reason}; stopped by the hang watchdog (on_stall: {run.spec.on_stall})")

    @staticmethod
    def _capture(folder: Path, stats: list[ranks.RankStats], verdict: ranks.StallVerdict, host: str,
                 slurm_job: str | None) -> None:
        try:
            ranks.capture_stacks(folder, stats, verdict, now=time.time(), host=host, slurm_job=slurm_job)
        except OSError as exc:  # a full or read-only LOGDIR: the stall itself is still shown
            log.warning("cannot keep the stacks of %s: %s", folder, exc)

    def _finish(self, run: _Run, code: int, now: float) -> None:
        assert run.proc is not None
        run.proc.cleanup()  # nothing of the run left behind (local: its group and escapees; Slurm: the job)
        never_ran = run.proc.never_ran
        run.exit_code, run.ended_at, run.kill_at = (None if run.proc.unknown or never_ran else code), now, None
        clear = (run.proc.exit_record or {}).get("cache_clear")
        run.record.cache_clear = clear if isinstance(clear, dict) else None  # this attempt's cache clear: argv, exit status, times
        state, reason = exit_state(code, unknown=run.proc.unknown, intent=run.intent, reason=run.reason, cache_clear=clear,
                                   ended_as=run.proc.ended_as(), never_ran=never_ran)
        if run.stalled and state is not RunState.SUCCEEDED:
            reason = f"{reason}; had stalled" if run.rank_timed else f"{reason}; had no output for {run.spec.stall_after:g}s"
        run.slot = None
        self._set(run, state, reason)
        if run.restart_on_end:
            run.restart_on_end = False
            self.restart(run.spec.run_id)

    def _busy(self) -> tuple[int, set[int], set[int]]:
        alive = [r for r in self.runs.values() if r.state.alive]
        return len(alive), {d for r in alive for d in r.devices}, {r.slot for r in alive if r.slot is not None}

    def _fill(self, now: float) -> None:
        """Start queued runs in order while there is room; a GPU run waiting for GPUs does not hold
        back a CPU run behind it (and vice versa), but runs of one kind start in queue order."""
        if self.hold_queue:
            return
        queued = [r for r in self.runs.values() if r.state is RunState.QUEUED]
        queued.sort(key=lambda r: not r.priority)
        waiting: set[bool] = set()  # kinds (uses GPUs?) with a run that must wait
        for run in queued:
            gpu = bool(run.spec.devices)
            if gpu in waiting:
                continue
            if now < run.retry_at:  # the backend asked for a pause (slurmctld unreachable): keep queue order
                waiting.add(gpu)
                continue
            count, _, _ = self._busy()
            if count >= self.max_parallel:
                return
            if self.cpu_budget and not gpu:
                cpu_runs = [r for r in self.runs.values() if r.state.alive and not r.spec.devices]
                used = sum(_cost(r.spec) for r in cpu_runs)
                if cpu_runs and used + _cost(run.spec) > self.cores:
                    waiting.add(gpu)
                    continue
            if not self._start(run):
                waiting.add(gpu)

    def _start(self, run: _Run) -> bool:
        """Start `run` if its devices are free; False means: wait (or it failed to start)."""
        spec = run.spec
        run.requeued_note = None  # a new job: no requeue of the earlier one is pending any more
        _, used, slots = self._busy()
        # NVML numbers GPUs in PCI bus order; make CUDA agree, so index N is the same GPU to both
        devices_env = {"CUDA_VISIBLE_DEVICES": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if self.backend.assigns_devices:  # this host's GPUs (Slurm hands out the compute nodes' itself)
            if spec.devices > len(self.gpus):
                self._set(run, RunState.FAILED, f"needs {spec.devices} GPU(s), this host has {len(self.gpus)}")
                return True
            free = [g for g in self.gpus if g not in used]
            if len(free) < spec.devices:
                return False
            run.devices = tuple(free[: spec.devices])
            devices_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, run.devices))
        else:
            devices_env = {}
        try:
            folder = self._folder(spec.run_id)
        except UnsafePath as exc:
            self._set(run, RunState.FAILED, f"not started: {exc}")
            return True
        env = {**spec.env, "PERFWATCH_MLLOG": str(folder / MLLOG_FILE), "PERFWATCH_RUN_ID": spec.run_id,
               "PERFWATCH_SEED": str(spec.seed), **devices_env}
        env.setdefault("OMP_NUM_THREADS", str(spec.threads))
        if spec.precision:
            env.setdefault("PERFWATCH_PRECISION", spec.precision)
        cpus, mem = None, None
        if spec.isolate == "per_device" and self.backend.assigns_devices:
            run.slot = min(set(range(self.max_parallel + len(slots) + 1)) - slots)
            cpus, mem = launch.cpu_share(run.slot, self.max_parallel)
        # "starting" is on disk before the process exists: a perfwatch that dies now never runs it twice
        self._set(run, RunState.STARTING, None)
        if not self._write():
            run.slot, run.devices = None, ()
            self._set(run, RunState.QUEUED, f"waiting: {self.write_error}")
            return False
        try:
            run.proc = self.backend.start(spec, folder, Launch(env=env, cpus=cpus, mem_bytes=mem))
        except TryLater as exc:  # e.g. slurmctld unreachable: back in the queue, retried with backoff
            run.slot, run.devices = None, ()
            run.retry_at = time.time() + exc.retry_in
            self._set(run, RunState.QUEUED, f"{exc} (next try in {exc.retry_in:g}s)")
            self._write()
            return False
        except Exception as exc:  # noqa: BLE001 - any start error fails this run, never the scheduler
            run.slot = None
            what = storage_problem(exc) if isinstance(exc, OSError) else str(exc)
            self._set(run, RunState.FAILED, f"cannot start: {what}")
            self._write()
            return True
        run.record.env_delta = env
        run.started_at = run.active_at = time.time()
        run.activity, run.priority = (), False
        pending = run.proc.pending()  # Slurm: submitted, waiting in the cluster's queue
        self._set(run, RunState.STARTING if pending else RunState.RUNNING, pending)
        self._write()  # the pid is on disk before the next run starts (retried every poll if it fails)
        return True

    def _set(self, run: _Run, state: RunState, reason: str | None) -> None:
        run.state, run.reason = state, reason
        self.events.append((run.spec.run_id, state, reason))
        self._dirty = True

    def drain_events(self) -> list[tuple[str, RunState, str | None]]:
        """State changes since the last call (run id, new state, reason), oldest first."""
        out = list(self.events)
        self.events.clear()
        return out

    def _write(self) -> bool:
        """Persist every run's state; False (and `write_error` set) when the file system refuses."""
        for run in self.runs.values():
            p = run.proc
            rec = run.record
            rec.state, rec.attempt, rec.exit_code = run.state, run.attempt, run.exit_code
            rec.started_at, rec.ended_at, rec.devices = run.started_at, run.ended_at, list(run.devices)
            rec.stalled, rec.reason, rec.paused_total, rec.intent = run.stalled, run.reason, run.paused_total, run.intent
            rec.paused_at, rec.slot = run.paused_at, run.slot
            rec.pid = rec.pgid = rec.create_time = rec.slurm_job_id = None  # the current attempt's facts only
            rec.host, rec.descendants = (socket.gethostname() if p else None), []
            for key, value in (p.facts() if p else {}).items():
                setattr(rec, key, value)
            if not run.state.alive:
                rec.descendants = []
        self.data.runs = [r.record for r in self.runs.values()]
        try:
            registry.write(self.logdir, self.data)
        except OSError as exc:  # disk full, quota, read-only remount: say so, keep going, retry next poll
            self._dirty = True
            problem = storage_problem(exc)
            self.write_error = problem
            return False
        self.write_error = None
        self._dirty = False
        return True
