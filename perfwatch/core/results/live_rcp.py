"""The RCP verdict a benchmark folder is heading for, while its runs are still coming in.

For the live views (headless `attach`, the TUI): when a run stops, the runs of its group (a
results folder, or a job's repeats) that have stopped so far go to `mlperf/rcp.project`, which
judges them with mlperf_logging's own RCP record for their batch size. Groups that no RCP rule
covers (open division, perfwatch's own workloads, a ruleset without RCPs) give None: nothing to say.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    same = [v for v in members if group_of(v) == group]
    bench = next((v.benchmark for v in same if v.benchmark), None)
    ruleset = next((v.ruleset for v in same if v.ruleset), None)
    division = next((v.division for v in same if v.division), None)
    if rcp.not_applicable(bench, ruleset, division) is not None:
        return None
    finished = [v.path for v in same if v.phase == "stopped"]
    if not finished:
        return None
    return rcp.project(finished, bench, ruleset, division)
