"""The campaign as a whole, live: one row per run group (a results folder, or a job's repeats).

For each group: runs done / live / converged, how many MLPerf needs for a score (its count per
benchmark, from mlperf_logging), the olympic score so far (× scaling.json, `results.summary`),
energy-to-train where telemetry recorded it, and the speed-up against a baseline group with its
bootstrap interval (`results.comparison`). The same computations as `report` and `compare`, on
the runs seen so far, plus the live RCP projection (`mlperf.rcp.project`); front ends only lay the
rows out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from perfwatch.core.mlperf.rcp import not_applicable, required_runs
from perfwatch.core.mlperf.rulesets import StandsFor
from perfwatch.core.model.status import RunStatus
from perfwatch.core.model.view import RunView
from perfwatch.core.results.comparison import Side, compare, sides
from perfwatch.core.results.live_rcp import group_projection, identity
from perfwatch.core.results.summary import group_of


@dataclass(frozen=True, slots=True)
class GroupRow:
    group: str
    benchmark: str | None
    runs: int
    stopped: int  # runs whose log says run_stop
    converged: int
    needed: int | None  # MLPerf's runs per score for the benchmark (None: not an MLPerf benchmark)
    score_minutes: float | None  # olympic mean so far × scaling.json
    note: str
    energy_kj: float | None  # median GPU energy-to-train of converged runs, where recorded
    speedup: float | None = None  # baseline score / this score: > 1 is faster than the baseline
    interval: tuple[float, float] | None = None  # its bootstrap 90 % interval
    is_baseline: bool = False
    rcp: str = ""  # the live RCP projection ("on track", "will be normalised ×1.012", "n/a (open division)")
    stands_for: StandsFor | None = None  # the campaign's `mlperf:` the group is judged as (its logs name none)
    # the energy score from the folder's MLPerf power logs (joules; `mlperf.power.SOURCE`), beside the
    # NVML `energy_kj` perfwatch measures itself; `energy_note`: why a folder with power logs has none
    energy_score_j: float | None = None
    energy_note: str = ""


def runs_needed(benchmark: str | None) -> int | None:
    """MLPerf training's runs per benchmark score (mlperf_logging's table); None when unknown."""
    return required_runs(benchmark) if benchmark else None


def rcp_projection(members: list[RunView], benchmark: str | None) -> str:
    """Where the group's RCP verdict is heading from its finished runs (`live_rcp`), one line; why not."""
    _bench, ruleset, division, _stand_in = identity(members)
    why = not_applicable(benchmark, ruleset, division)
    if why is not None:
        return f"n/a ({why})"
    try:
        projection = group_projection(members)
    except Exception as exc:  # mlperf_logging could not judge these files: say so, keep the view
        return f"n/a ({exc})"
    if projection is None:
        return "waiting for a finished run"
    return projection.text.split(": ", 1)[-1]  # "RCP: …" or, for a stand-in, "RCP as bert (…): …"


def group_runs(views: Iterable[RunView]) -> dict[str, list[RunView]]:
    out: dict[str, list[RunView]] = {}
    for v in views:
        out.setdefault(group_of(v), []).append(v)
    return out


def group_rows(views: Mapping[str, RunView], baseline: str | None = None,
               statuses: Mapping[str, RunStatus] | None = None) -> list[GroupRow]:
    """One row per group, sorted by name; `baseline` names the group the others are compared with.
    `statuses`: the engine's judgement of each run (core/model/status.py), which counts a run that
    crashed or was killed before its log said run_stop as ended; without it, the log's phase decides."""
    groups = group_runs(views.values())
    base = groups.get(baseline) if baseline else None
    rows = []
    for name in sorted(groups):
        members = groups[name]
        side = _one_side(members)
        stand_in = identity(members)[3]  # the campaign's `mlperf:` where the logs name no MLPerf benchmark
        bench = (stand_in.benchmark if stand_in is not None else side.benchmark if side is not None
                 else next((v.benchmark for v in members if v.benchmark), None))
        speedup = interval = None
        if base is not None and name != baseline:
            comps = compare(base, members)
            if len(comps) == 1:
                speedup, interval = comps[0].speedup, comps[0].interval
        rows.append(GroupRow(
            group=name, benchmark=bench, runs=len(members),
            stopped=sum(_ended(v, statuses) for v in members),
            converged=len(side.minutes) if side is not None else 0, needed=runs_needed(bench),
            score_minutes=side.score if side is not None else None, note=side.note if side is not None else "",
            energy_kj=side.energy_median if side is not None else None, speedup=speedup, interval=interval,
            is_baseline=name == baseline, rcp=rcp_projection(members, bench), stands_for=stand_in,
            energy_score_j=side.energy_score_j if side is not None else None,
            energy_note=side.energy_note if side is not None else "",
        ))
    return rows


def _ended(view: RunView, statuses: Mapping[str, RunStatus] | None) -> bool:
    """The log says run_stop, or the engine judged the run ended (it crashed or was killed first)."""
    status = statuses.get(view.run_id) if statuses is not None else None
    return view.phase == "stopped" or (status is not None and status.state.ended)


_SIDES: dict[tuple[tuple[str, int], ...], Side | None] = {}


def _one_side(members: list[RunView]) -> Side | None:
    """The group's score (cached by its runs' view versions: energy reads telemetry files)."""
    key = tuple((v.run_id, v.version) for v in members)
    if key not in _SIDES:
        if len(_SIDES) > 512:
            _SIDES.clear()
        scored = sides(members)
        found = [s for group in scored.values() for s in group]
        _SIDES[key] = found[0] if len(found) == 1 else None
    return _SIDES[key]
