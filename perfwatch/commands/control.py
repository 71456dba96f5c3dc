"""`perfwatch control LOGDIR RUN_ID ACTION`: pause, resume, stop, kill, restart or start one run, for scripts.

The exit status says whether the action took effect: 0 it did (the run's state in perfwatch.json
shows it), 1 it did not within --timeout or the backend could not deliver it (the reason is
printed; the action is not applied later), 2 it cannot apply (unknown run, wrong state, not a
perfwatch LOGDIR). While a perfwatch owns the campaign the action goes to it through
LOGDIR/requests/; when nobody owns it, this command takes the campaign over just for the action
(starting no queued run) and gives it up again.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from perfwatch.commands._options import path_arg

if TYPE_CHECKING:
    from perfwatch.core.control.registry import RunRecord
    from perfwatch.core.control.scheduler import Scheduler

# the command's words; `start` is the controller's `start_now` (core/control/states.py `Action`)
WORDS = ("pause", "resume", "stop", "kill", "restart", "start")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "control",
        help="pause/resume/stop/kill/restart/start one run of a campaign (exit 0 when it took effect)",
        description="Act on one run of a launched campaign, local or Slurm, from scripts and CI. Exit status: "
        "0 the action took effect, 1 it did not within --timeout, 2 it does not apply.",
    )
    p.add_argument("logdir", type=path_arg, help="the campaign's LOGDIR")
    p.add_argument("run_id", help="run id (as in `perfwatch report LOGDIR`)")
    p.add_argument("action", choices=sorted(WORDS), help="what to do")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the effect (default 60)")
    p.set_defaults(func=run)


def _record(logdir: Path, run_id: str) -> RunRecord | None:
    from perfwatch.core.control import registry

    data = registry.read(logdir)
    if data is None:
        return None
    return next((r for r in data.runs if r.run_id == run_id), None)


def took_effect(action: str, before: RunRecord, now: RunRecord) -> bool:
    """Whether the run's entry in perfwatch.json shows the action done."""
    from perfwatch.core.control.states import Action, RunState

    state = now.state
    if action == Action.PAUSE:
        return state is RunState.PAUSED
    if action == Action.RESUME:
        return state in (RunState.RUNNING, RunState.STALLED)
    if action in (Action.STOP, Action.KILL):
        return state.terminal
    if action == Action.RESTART:
        return now.attempt > before.attempt
    return state is not RunState.QUEUED  # start


def stopping(action: str, state: object) -> bool:
    """A stop asked of a run that is already stopping: nothing to send, wait for the end."""
    from perfwatch.core.control.states import RunState

    return action == "stop" and RunState.of(state) is RunState.STOPPING


def refusal(backend: str, action: str, state: object) -> str | None:
    from perfwatch.core.control.backends import why_not
    from perfwatch.core.control.states import RunState

    state = RunState.of(state)
    if backend == "slurm":
        from perfwatch.core.control.backends.slurm import slurm_why_not

        return slurm_why_not(action, state)
    return why_not(action, state)


def run(args: argparse.Namespace) -> int:
    from perfwatch.core.control import registry
    from perfwatch.core.control.controller import withdraw_request
    from perfwatch.core.control.states import Action, refusal_of

    logdir: Path = args.logdir
    data = registry.read(logdir) if logdir.is_dir() else None
    if data is None:
        print(f"perfwatch control: {logdir}: not a perfwatch LOGDIR (no perfwatch.json)", file=sys.stderr)
        return 2
    before = next((r for r in data.runs if r.run_id == args.run_id), None)
    if before is None:
        known = ", ".join(r.run_id for r in data.runs)
        print(f"perfwatch control: no run {args.run_id!r} in {logdir}; runs: {known}", file=sys.stderr)
        return 2
    action = Action.START_NOW if args.action == "start" else Action(args.action)
    backend = str((data.backend or {}).get("backend") or "local")
    # a stop of a run already stopping (another `control`, the TUI) joins it: it answers when the run ends
    joining = stopping(action, before.state)
    why = None if joining else refusal(backend, action, before.state)
    if why:
        print(f"perfwatch control: {args.run_id}: {why}", file=sys.stderr)
        return 2
    owner, sent = None, None
    deadline = time.monotonic() + args.timeout
    try:
        while True:
            if joining:
                if owner is None and not registry.owner_alive(logdir):
                    owner = _take_over(logdir)  # the stop goes on: its SIGKILL after the grace needs an owner
            elif owner is None and sent is None:  # act as the owner, or ask the owner
                owner, sent = _act(logdir, action, args.run_id, max(1.0, deadline - time.monotonic()))
                if owner is None and sent is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue  # the owner went away meanwhile: take over
            if owner is not None:
                owner.poll()
            now = _record(logdir, args.run_id)
            why_not_done = refusal_of(action, now.reason) if now is not None and now.reason != before.reason else None
            if why_not_done is not None:  # the backend could not deliver it: refused now, never applied later
                print(f"perfwatch control: {args.run_id}: {args.action} not done: {why_not_done}", file=sys.stderr)
                return 1
            if now is not None and took_effect(action, before, now):
                reason = f" ({now.reason})" if now.reason else ""
                print(f"{args.run_id}: {now.state}{reason}")
                return 0
            if sent is not None and not registry.owner_alive(logdir) and withdraw_request(sent):
                # nobody is left to execute it (an owner that closed before reading it): act ourselves
                sent = None
                joining = now is not None and stopping(action, now.state)
                if now is not None and not joining and refusal(backend, action, now.state):
                    print(f"perfwatch control: {args.run_id}: {refusal(backend, action, now.state)}",
                          file=sys.stderr)
                    return 2
                continue
            if time.monotonic() >= deadline:
                state = now.state if now else "unknown"
                gone = sent is not None and withdraw_request(sent)
                note = ("; the request is withdrawn: it will never be executed" if gone else
                        "; the owner took the request but it has not taken effect yet" if sent is not None else "")
                print(f"perfwatch control: {args.run_id}: {args.action} did not take effect within "
                      f"{args.timeout:g}s (state: {state}){note}", file=sys.stderr)
                return 1
            time.sleep(0.1)
    finally:
        if owner is not None:
            _settle(owner)
            owner.close(stop_runs=False)


def _act(logdir: Path, action: str, run_id: str, ttl: float) -> tuple[Scheduler | None, Path | None]:
    """Apply the action: as the campaign's owner when nobody owns it (the owner returned), else through
    a request to the live owner (its path returned). (None, None): the owner left in between."""
    from perfwatch.core.control import registry
    from perfwatch.core.control.controller import action_method, send_request

    if registry.owner_alive(logdir):
        try:
            return None, send_request(logdir, action, run_id, ttl=ttl)
        except OSError as exc:
            print(f"perfwatch control: cannot send {action} to {logdir}: {exc.strerror or exc}", file=sys.stderr)
            raise SystemExit(2) from None
    owner = _take_over(logdir)
    if owner is None:
        return None, None
    action_method(owner, action)(run_id)
    return owner, None


def _settle(owner: Scheduler) -> None:
    """Before a temporary owner gives the campaign up: a run it is stopping ends (SIGKILL after its
    grace) instead of being left `stopping` with nobody to escalate."""
    from perfwatch.core.control.states import RunState

    stopping = [r for r in owner.runs.values() if r.state is RunState.STOPPING]
    deadline = time.monotonic() + max((r.spec.grace for r in stopping), default=0) + 5
    while any(r.state is RunState.STOPPING for r in owner.runs.values()) and time.monotonic() < deadline:
        owner.poll()
        time.sleep(0.05)


def _take_over(logdir: Path) -> Scheduler | None:
    from perfwatch.core.control.backends import BackendError
    from perfwatch.core.control.registry import RegistryError
    from perfwatch.core.control.scheduler import Scheduler, Untrusted
    from perfwatch.core.control.trust import UnsafeKey

    try:
        owner = Scheduler.take_over(logdir)
    except (BackendError, RegistryError, UnsafeKey) as exc:
        print(f"perfwatch control: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except Untrusted as exc:  # never act on a plan this user did not launch here (see `attach --take-over`)
        print(f"perfwatch control: not taking {logdir} over: {exc.reason}; "
              f"`perfwatch attach {logdir} --take-over` shows what would run", file=sys.stderr)
        raise SystemExit(2) from None
    if owner is not None:
        owner.hold_queue = True
    return owner
