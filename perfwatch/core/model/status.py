"""What a run's state is, in words every front end shows the same way: the one table.

`judge(view, proc)` turns what the log says (a `RunView`) and what the controller knows about the
process (a `ProcInfo` while perfwatch runs, a perfwatch.json record for `report`) into a `RunStatus`:
a state word (`State`), why (`reason`), where the run stands against its target (`Verdict`), whether
it counts as failed, and the colour class the TUI paints it with. `Counts` adds them up for a header,
`report`'s totals and the metrics endpoint. The words and rules are documented once, in docs/report.md
("Run states").
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from enum import StrEnum
from typing import Protocol

import msgspec

from perfwatch.core.control.states import RunState
from perfwatch.core.mlperf.rulesets import is_dated
from perfwatch.core.mlperf.targets import Target
from perfwatch.core.model.view import RunView

__all__ = ["KINDS", "Counts", "ProcFacts", "RunStatus", "State", "Verdict", "count", "judge"]


class State(StrEnum):
    """A run's state as shown: the process's while a controller knows it, else the log's."""

    QUEUED = "queued"  # planned, not started yet
    STARTING = "starting"  # being started (or pending in Slurm's queue)
    WAITING = "waiting"  # a log nobody controls, with records but no init_start/run_start yet
    INITIALIZING = "initializing"  # init_start logged, no run_start yet
    RUNNING = "running"
    STALLED = "stalled"  # alive, but no output for stall_after
    PAUSED = "paused"
    STOPPING = "stopping"  # asked to stop, not exited yet
    DONE = "done"  # ended by itself (exit 0, or run_stop with status success), or stopped at its target by perfwatch
    ABORTED = "aborted"  # the log's run_stop says a status other than success
    STOPPED = "stopped"  # stopped by the user (or cancelled before it started)
    KILLED = "killed"  # SIGKILL, by the user or from outside
    CRASHED = "crashed"  # exited by itself with an exit status other than 0
    FAILED = "failed"  # could not start (no GPU, cannot write its folder, cache clear failed)
    TIMEOUT = "timeout"  # stopped by perfwatch after the job's timeout (or by Slurm at its time limit)
    CANCELLED = "cancelled"  # ended by someone other than perfwatch (a Slurm scancel, preemption)
    UNKNOWN = "unknown"  # ended, and nothing says how (no exit record)

    @property
    def alive(self) -> bool:
        return self in _ALIVE

    @property
    def ended(self) -> bool:
        return self in _ENDED

    @property
    def bad_end(self) -> bool:
        """Ended without finishing: a run in this state fails unless its target was reached."""
        return self in _BAD_END


_ALIVE = frozenset({State.STARTING, State.INITIALIZING, State.RUNNING, State.STALLED, State.PAUSED,
                    State.STOPPING})
_BAD_END = frozenset({State.ABORTED, State.STOPPED, State.KILLED, State.CRASHED, State.FAILED, State.TIMEOUT,
                      State.CANCELLED, State.UNKNOWN})
_ENDED = _BAD_END | {State.DONE}


class Verdict(StrEnum):
    """Where a run stands against its target (its current attempt's log only)."""

    REACHED = "reached"
    NOT_REACHED = "not reached"
    NO_TARGET = "no target"


# the TUI's colour classes (its theme paints each), in the order its state column sorts
KINDS = ("queued", "running", "paused", "reached", "done", "failed", "stalled")


class RunStatus(msgspec.Struct, frozen=True):
    state: State
    verdict: Verdict
    reason: str  # why it is in this state ("stopped by user", "crashed with exit 2"); "" when nothing to say
    failed: bool  # ended without finishing and without reaching its target
    kind: str  # one of KINDS

    @property
    def word(self) -> str:
        return self.state.value


class ProcFacts(Protocol):
    """What `judge` reads of a process: `ProcInfo` (live) and perfwatch.json's `RunRecord` both have it."""

    @property
    def state(self) -> RunState: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def stalled(self) -> bool: ...


_FROM_PROCESS = {
    RunState.QUEUED: State.QUEUED, RunState.STARTING: State.STARTING, RunState.RUNNING: State.RUNNING,
    RunState.STALLED: State.STALLED, RunState.PAUSED: State.PAUSED, RunState.STOPPING: State.STOPPING,
    RunState.SUCCEEDED: State.DONE, RunState.KILLED: State.KILLED, RunState.STOPPED: State.STOPPED,
    RunState.TIMEOUT: State.TIMEOUT, RunState.CANCELLED: State.CANCELLED, RunState.UNKNOWN: State.UNKNOWN,
}
_FROM_PHASE = {"waiting": State.WAITING, "init": State.INITIALIZING, "running": State.RUNNING, "eval": State.RUNNING}


# a log nobody controls that stopped without run_stop this long ago (by its records' own clock) is over
SILENT_ENDED_MS = 24 * 3600 * 1000.0


def judge(view: RunView | None, proc: ProcFacts | None = None, planned: Target | None = None,
          now_ms: float | None = None) -> RunStatus:
    """The one status of a run. `view`: its log (None: no record yet); `proc`: its process facts (None:
    nobody controls it); `planned`: the campaign's target, for a run whose log has none yet; `now_ms`:
    the wall clock, which ends a log nobody controls that has been silent for SILENT_ENDED_MS without
    run_stop (a published result file cut short is not `running`)."""
    state, reason = _state(view, proc)
    if proc is None and view is not None and state.alive and now_ms is not None and silent(view, now_ms):
        assert view.last_time_ms is not None
        last = _dt.datetime.fromtimestamp(view.last_time_ms / 1000.0, _dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        state, reason = State.UNKNOWN, f"the log ends without run_stop (last record {last})"
    target = view.target if view is not None and view.target is not None else planned
    if target is None:
        verdict = Verdict.NO_TARGET
    elif view is not None and view.target_reached:
        verdict = Verdict.REACHED
    else:
        verdict = Verdict.NOT_REACHED
    failed = state.bad_end and verdict is not Verdict.REACHED
    return RunStatus(state, verdict, reason, failed, _kind(state, verdict, failed))


def silent(view: RunView, now_ms: float) -> bool:
    """Its last record is dated and older than SILENT_ENDED_MS (logs with placeholder times never are)."""
    last = view.last_time_ms
    return is_dated(last) and last is not None and now_ms - last > SILENT_ENDED_MS


def _state(view: RunView | None, proc: ProcFacts | None) -> tuple[State, str]:
    if proc is not None:
        rs = proc.state
        reason = proc.reason or ""
        if rs is RunState.FAILED:
            code = proc.exit_code
            if code is not None and code > 0:
                rest = reason.removeprefix(f"exit {code}").lstrip("; ")
                return State.CRASHED, f"crashed with exit {code}" + (f"; {rest}" if rest else "")
            return State.FAILED, reason
        state = _FROM_PROCESS.get(rs, State.UNKNOWN)
        if proc.stalled and state is State.RUNNING:
            state = State.STALLED
        if state is State.RUNNING and view is not None and view.phase == "init":
            state = State.INITIALIZING
        return state, reason
    if view is None:
        return State.QUEUED, ""
    if view.phase == "stopped":
        if view.run_status == "success":
            return State.DONE, ""
        return State.ABORTED, f"run_stop status {view.run_status or 'missing'}"
    return _FROM_PHASE.get(view.phase, State.RUNNING), ""


def _kind(state: State, verdict: Verdict, failed: bool) -> str:
    if state in (State.QUEUED, State.STARTING, State.WAITING):
        return "queued"
    if state is State.PAUSED:
        return "paused"
    if state is State.STALLED:
        return "stalled"
    if verdict is Verdict.REACHED:
        return "reached"
    if state.alive:
        return "running"
    return "failed" if failed else "done"


class Counts(msgspec.Struct, frozen=True):
    """Totals over runs: how many in each state, against their targets, failed."""

    runs: int
    states: dict[str, int]  # state word -> runs, only states some run is in
    reached: int
    not_reached: int
    no_target: int
    failed: int
    alive: int
    ended: int
    to_go: int = 0  # of `not_reached`: the runs that are queued or still going (they may reach it yet)

    @property
    def verdicts(self) -> dict[str, int]:
        return {Verdict.REACHED.value: self.reached, Verdict.NOT_REACHED.value: self.not_reached,
                Verdict.NO_TARGET.value: self.no_target}

    def target_text(self) -> str:
        """"2 reached, 3 to go, 1 not reached, 20 no target" (only the nonzero ones): how every front end says
        where the runs stand against their targets; "not reached" counts only runs that ended without it."""
        parts = {Verdict.REACHED.value: self.reached, "to go": self.to_go,
                 Verdict.NOT_REACHED.value: self.not_reached - self.to_go, Verdict.NO_TARGET.value: self.no_target}
        return ", ".join(f"{n} {word}" for word, n in parts.items() if n)


def count(statuses: Iterable[RunStatus]) -> Counts:
    states: dict[str, int] = {}
    verdicts = dict.fromkeys(Verdict, 0)
    failed = alive = ended = runs = to_go = 0
    for s in statuses:
        runs += 1
        states[s.word] = states.get(s.word, 0) + 1
        verdicts[s.verdict] += 1
        to_go += s.verdict is Verdict.NOT_REACHED and not s.state.ended
        failed += s.failed
        alive += s.state.alive
        ended += s.state.ended
    ordered: dict[str, int] = {str(st.value): states[st.value] for st in State if st.value in states}
    return Counts(runs, ordered, verdicts[Verdict.REACHED], verdicts[Verdict.NOT_REACHED],
                  verdicts[Verdict.NO_TARGET], failed, alive, ended, to_go)
