"""Slurm's job states and what each means to perfwatch: the one table.

Slurm's own word is always shown next to perfwatch's state (`timeout  Slurm: TIMEOUT, the
job's time limit`), so a user can match a run to `squeue`/`sacct` and to the site's accounting.

`LIVE` states keep a run alive (pending ones show as `starting` with Slurm's reason). An ended
job's `ENDED` entry gives the perfwatch state it means when perfwatch did not stop the job itself
(None: decided by the exit status, as for a local run) and the words shown with it. A job that
perfwatch stopped, killed or timed out ends in the state perfwatch intended, with Slurm's word
added (Slurm records perfwatch's stop as CANCELLED, because it is an `scancel`).
"""

from __future__ import annotations

from perfwatch.core.control.states import RunState

PENDING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
LIVE = PENDING | {"RUNNING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "COMPLETING", "STAGE_OUT"}
SUSPENDED = frozenset({"SUSPENDED", "STOPPED"})

# Slurm state -> (perfwatch state when perfwatch did not end the job; None: the exit status decides, words)
ENDED: dict[str, tuple[RunState | None, str]] = {
    "COMPLETED": (None, "the batch script exited 0"),
    "FAILED": (None, "non-zero exit"),
    "CANCELLED": (RunState.CANCELLED, "cancelled in Slurm, not by perfwatch"),
    "TIMEOUT": (RunState.TIMEOUT, "the job's Slurm time limit was reached"),
    "DEADLINE": (RunState.TIMEOUT, "the job's --deadline passed"),
    "PREEMPTED": (RunState.CANCELLED, "preempted by Slurm for another job"),
    "NODE_FAIL": (RunState.FAILED, "a node of the job failed"),
    "BOOT_FAIL": (RunState.FAILED, "a node of the job failed to boot"),
    "OUT_OF_MEMORY": (RunState.FAILED, "out of memory (Slurm's memory limit)"),
    "SPECIAL_EXIT": (RunState.FAILED, "special exit: the job is held for requeue"),
    "REVOKED": (RunState.CANCELLED, "revoked: a federation sibling runs it"),
}


def ended_as(word: str, intended: bool) -> tuple[RunState | None, str]:
    """What an ended job means: (perfwatch state or None for 'decide by exit status', text with Slurm's word).

    `intended`: perfwatch itself stopped, killed or timed out this job (its state then stands).
    """
    state, words = ENDED.get(word, (RunState.FAILED, "a state perfwatch does not know"))
    if intended:
        return None, f"Slurm: {word}"
    return state, f"Slurm: {word}, {words}"


def requeued_text(restarts: int) -> str:
    """The reason a run shows once Slurm put its job back in the queue (requeue, preemption, node failure)."""
    return f"requeued by Slurm (restart {restarts}): a new attempt of the same job"


__all__ = ["ENDED", "LIVE", "PENDING", "SUSPENDED", "ended_as", "requeued_text"]
