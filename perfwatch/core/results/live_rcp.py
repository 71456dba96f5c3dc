"""The RCP verdict a benchmark folder is heading for, while its runs are still coming in.

For the live views (headless `attach`, the TUI): when a run stops, the runs of its group (a
results folder, or a job's repeats) that have stopped so far go to `mlperf/rcp.project`, which
judges them with mlperf_logging's own RCP record for their batch size. Groups that no RCP rule
covers (open division, perfwatch's own workloads, a ruleset without RCPs) give None: nothing to say.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence

from perfwatch.core.mlperf import rcp
from perfwatch.core.model.view import RunView
from perfwatch.core.results.summary import group_of


def projection_for(views: Iterable[RunView], run_id: str) -> rcp.Projection | None:
    """The projection of `run_id`'s group from its stopped runs, or None where no RCP applies."""
    members = list(views)
    mine = next((v for v in members if v.run_id == run_id), None)
    if mine is None:
        return None
    group = group_of(mine)
    return group_projection([v for v in members if group_of(v) == group])


def group_projection(same: Sequence[RunView]) -> rcp.Projection | None:
    """The projection of one group (its stopped runs), or None where no RCP applies or none stopped."""
    bench = next((v.benchmark for v in same if v.benchmark), None)
    ruleset = next((v.ruleset for v in same if v.ruleset), None)
    division = next((v.division for v in same if v.division), None)
    if rcp.not_applicable(bench, ruleset, division) is not None:
        return None
    finished = tuple(sorted((v.path, _stamp(v.path)) for v in same if v.phase == "stopped"))
    if not finished:
        return None
    return _project(finished, bench, ruleset, division)


@functools.lru_cache(maxsize=256)
def _project(finished: tuple[tuple[str, tuple[int, int]], ...], bench: str | None, ruleset: str | None,
             division: str | None) -> rcp.Projection:
    """Cached by the stopped runs' logs (path, size, mtime: a restarted run rewrites its log): live views
    ask again and again; the answer changes only when a run stops or its log changes."""
    return rcp.project([path for path, _stamp in finished], bench, ruleset, division)


def _stamp(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)
