"""A run's lifecycle states and which control action applies in which state: the one table.

A `StrEnum`, so the value is what perfwatch.json stores ("running") and front ends compare
members, never strings. Imported by the registry, the scheduler, controllers and the UI alike.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ACTIONS", "Action", "RunState", "allowed", "refusal_of", "refused"]


class Action(StrEnum):
    """What a user can do to one run; the value is what a request file and `can()` carry."""

    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"
    KILL = "kill"
    RESTART = "restart"
    START_NOW = "start_now"


ACTIONS = tuple(Action)


class RunState(StrEnum):
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    STALLED = "stalled"  # running, but no output for stall_after
    PAUSED = "paused"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"
    STOPPED = "stopped"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"  # ended by someone else: a cluster's scancel, preemption, an operator
    UNKNOWN = "unknown"  # re-adopted, process gone, no exit record

    @classmethod
    def of(cls, value: object, default: RunState | None = None) -> RunState:
        """The member whose value is `value`; an unknown or missing value is `default` (else UNKNOWN)."""
        try:
            return cls(str(value)) if isinstance(value, str) else (default or cls.UNKNOWN)
        except ValueError:
            return default if default is not None else cls.UNKNOWN

    @property
    def alive(self) -> bool:
        return self in _ALIVE

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_ALIVE = frozenset({RunState.STARTING, RunState.RUNNING, RunState.STALLED, RunState.PAUSED, RunState.STOPPING})
_TERMINAL = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.KILLED, RunState.STOPPED, RunState.TIMEOUT, RunState.CANCELLED,
     RunState.UNKNOWN}
)


def refused(action: str, why: str) -> str:
    """A run's reason when the backend could not deliver `action` now (never retried behind the user's back)."""
    return f"{action.replace('_', ' ')} not done: {why}"


def refusal_of(action: str, reason: str | None) -> str | None:
    """The `why` of `refused(action, why)` when `reason` is one, else None (`perfwatch control` exits 1 on it)."""
    head = refused(action, "")
    return reason[len(head):] if reason and reason.startswith(head) else None


def allowed(action: str, state: RunState) -> bool:
    """The one table of which action applies in which state (UI greys out the rest)."""
    if action == Action.PAUSE:
        return state in (RunState.RUNNING, RunState.STALLED)
    if action == Action.RESUME:
        return state is RunState.PAUSED
    if action == Action.STOP:
        return state in (RunState.QUEUED, RunState.STARTING, RunState.RUNNING, RunState.STALLED, RunState.PAUSED)
    if action == Action.KILL:
        return state.alive
    if action == Action.RESTART:
        return state.terminal
    if action == Action.START_NOW:
        return state is RunState.QUEUED
    return False
