"""The RCP verdict a benchmark folder is heading for, while its runs are still coming in.

For the live views (headless `attach`, the TUI): when a run stops, the runs of its group (a
results folder, or a job's repeats) that have stopped so far go to `mlperf/rcp.project`, which
judges them with mlperf_logging's own RCP record for their batch size. Groups that no RCP rule
covers (open division, perfwatch's own workloads, a ruleset without RCPs) give None: nothing to say.
A campaign's job that names the MLPerf benchmark it stands for (`mlperf:`) is judged as that benchmark,
ruleset and division where its logs name no MLPerf benchmark themselves (`identity`); the checker then
reads the logs as naming that benchmark (`rcp.project(..., as_benchmark=True)`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence

import msgspec

from perfwatch.core.mlperf import rcp
from perfwatch.core.mlperf.rulesets import StandsFor
from perfwatch.core.model.view import RunView
from perfwatch.core.results.summary import group_of, refused_files


def projection_for(views: Iterable[RunView], run_id: str) -> rcp.Projection | None:
    """The projection of `run_id`'s group from its stopped runs, or None where no RCP applies."""
    members = list(views)
    mine = next((v for v in members if v.run_id == run_id), None)
    if mine is None:
        return None
    group = group_of(mine)
    return group_projection([v for v in members if group_of(v) == group])


def identity(same: Sequence[RunView]) -> tuple[str | None, str | None, str | None, StandsFor | None]:
    """(benchmark, ruleset, division) a group is judged as, and the campaign's `mlperf:` when that is what
    says so (its runs' logs name no MLPerf benchmark); else what the logs say."""
    stand_in = next((v.stands_for for v in same if v.stands_for is not None), None)
    if stand_in is not None:
        return stand_in.benchmark, stand_in.ruleset, stand_in.division, stand_in
    bench = next((v.benchmark for v in same if v.benchmark), None)
    ruleset = next((v.ruleset for v in same if v.ruleset), None)
    division = next((v.division for v in same if v.division), None)
    return bench, ruleset, division, None


def group_projection(same: Sequence[RunView]) -> rcp.Projection | None:
    """The projection of one group (its stopped runs), or None where no RCP applies or none stopped."""
    bench, ruleset, division, stand_in = identity(same)
    if rcp.not_applicable(bench, ruleset, division) is not None:
        return None
    stopped = [v for v in same if v.phase == "stopped"]
    if not stopped:
        return None
    refused = refused_files(stopped)  # mlperf_logging's per-line regex is unbounded on such files: not handed over
    if refused:
        return rcp.Projection("n/a", f"RCP: n/a (not projected: {refused[0]})", 0, 0, None, None, None)
    finished = tuple(sorted((v.path, _stamp(v.path)) for v in stopped))
    proj = _project(finished, bench, ruleset, division, stand_in is not None)
    if stand_in is None:
        return proj
    return msgspec.structs.replace(proj, text=proj.text.replace("RCP: ", f"RCP as {stand_in.describe()}: ", 1))


@functools.lru_cache(maxsize=256)
def _project(finished: tuple[tuple[str, tuple[int, int]], ...], bench: str | None, ruleset: str | None,
             division: str | None, as_benchmark: bool = False) -> rcp.Projection:
    """Cached by the stopped runs' logs (path, size, mtime: a restarted run rewrites its log): live views
    ask again and again; the answer changes only when a run stops or its log changes."""
    return rcp.project([path for path, _stamp in finished], bench, ruleset, division, as_benchmark=as_benchmark)


def _stamp(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)
