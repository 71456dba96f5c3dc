"""A restarted run's earlier attempts: what each one ended as, from its kept files and perfwatch.json.

A restart keeps the attempt's files as `.attempt-N.<name>` in the run folder (core/layout.py) and
its process facts in the run's `attempts` list in perfwatch.json; `earlier_attempts` reads both
back into one short `Attempt` per earlier attempt, judged by the same rules as the current one
(core/model/status.py). The live view's detail pane and `report` show the same list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from perfwatch.core.control.states import RunState
from perfwatch.core.layout import MLLOG_FILE, OUTPUT_FILE, archived_name
from perfwatch.core.mlperf.targets import Target
from perfwatch.core.model.book import iter_blocks
from perfwatch.core.model.run import Run
from perfwatch.core.model.status import judge
from perfwatch.core.model.view import RunView

__all__ = ["Attempt", "attempt_view", "earlier_attempts"]


class Attempt(msgspec.Struct, frozen=True):
    """One earlier attempt of a run, as the detail pane and `report` list it."""

    attempt: int
    state: str  # the state word (core/model/status.py)
    reason: str
    verdict: str  # reached / not reached / no target
    last_eval: float | None
    time_ms: float | None  # time-to-train when it logged run_stop, else how long it trained
    started_at: float | None  # wall clock
    ended_at: float | None


@dataclass(frozen=True)
class _Facts:
    state: RunState
    exit_code: int | None
    reason: str | None
    stalled: bool = False


def attempt_view(folder: Path, attempt: int, run_id: str, target: Target | None = None) -> RunView | None:
    """The log of an earlier attempt, read once from its kept `mllog.txt` (else `output.log`); None if neither."""
    for name in (MLLOG_FILE, OUTPUT_FILE):
        path = folder / archived_name(attempt, name)
        run = Run(run_id, str(path), target=target)
        try:
            blocks = iter_blocks(path)  # streamed: a long attempt's log never sits in memory whole
            block = next(blocks, None)
            while block is not None:
                following = next(blocks, None)
                run.feed_block(block, last=following is None)
                block = following
        except OSError:
            continue
        run.finish()
        if run.view().records:
            return run.view()
    return None


def earlier_attempts(folder: Path, run_id: str, records: Sequence[Mapping[str, Any]],
                     target: Target | None = None) -> tuple[Attempt, ...]:
    """Every earlier attempt listed in perfwatch.json (`records`: a run's `attempts`), oldest first."""
    out = []
    for rec in records:
        n = rec.get("attempt")
        if not isinstance(n, int) or isinstance(n, bool):
            continue
        code = rec.get("exit_code")
        reason = rec.get("reason")
        facts = _Facts(RunState.of(rec.get("state")), code if isinstance(code, int) else None,
                       reason if isinstance(reason, str) else None)
        view = attempt_view(folder, n, run_id, target)
        status = judge(view, facts, target)
        started, ended = rec.get("started_at"), rec.get("ended_at")
        out.append(Attempt(
            n, status.word, status.reason, status.verdict.value, view.last_eval if view else None,
            view.elapsed_ms if view else None,
            started if isinstance(started, int | float) else None, ended if isinstance(ended, int | float) else None,
        ))
    return tuple(out)
