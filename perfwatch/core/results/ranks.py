"""The ranks of a report's distributed runs: per-rank summaries and straggler/stall findings.

The numbers come from `core/telemetry/ranks.py` (one computation for the live view, `report`,
`--headless` and the metrics endpoint); this module only lays them out as report rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfwatch.core import layout
from perfwatch.core.telemetry.ranks import RankReport, rank_report

__all__ = ["RANK_COLUMNS", "RankedRun", "rank_rows", "ranked_runs", "ranks_json", "render_ranks"]

RANK_COLUMNS: list[tuple[str, str, int]] = [
    ("run", "run", 0),
    ("rank", "rank", 0),
    ("node", "node", 0),
    ("local_rank", "local", 0),
    ("device", "device", 0),
    ("pid", "pid", 0),
    ("steps", "steps", 0),
    ("step_now_ms", "step ms now", 1),
    ("step_median_ms", "median", 1),
    ("step_p95_ms", "p95", 1),
    ("data_pct", "data %", 1),
    ("collective_pct", "coll %", 1),
    ("mark", "", 0),
]


class RankedRun:
    """A run of the report that wrote rank files, with its rank report."""

    def __init__(self, run_id: str, folder: Path, report: RankReport) -> None:
        self.run_id, self.folder, self.report = run_id, folder, report

    def findings(self) -> list[str]:
        out = []
        if self.report.straggler is not None:
            out.append(f"{self.run_id}: straggler {self.report.straggler.text}")
        capture = self.report.latest_capture()
        if capture is not None:
            stuck = ", ".join(map(str, capture.get("stuck_ranks") or [])) or "none"
            waiting = ", ".join(map(str, capture.get("waiting_ranks") or [])) or "none"
            out.append(f"{self.run_id}: {capture.get('verdict')}; stuck (not in a collective): rank {stuck}; "
                       f"waiting in a collective: rank {waiting}; stacks in "
                       f"{layout.STACKS_DIR}/{self.report.captures[-1].name}")
        return out


def ranked_runs(views: Any) -> list[RankedRun]:
    """The runs among `views` (RunView-like: run_id, path) whose folder holds rank files."""
    out = []
    for view in views:
        folder = Path(view.path).parent
        if not (folder / layout.RANKS_DIR).is_dir():
            continue
        rep = rank_report(folder)
        if rep is not None:
            out.append(RankedRun(view.run_id, folder, rep))
    return out


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1e3


def _pct(x: float | None) -> float | None:
    return None if x is None else x * 100


def rank_rows(runs: list[RankedRun]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        slow = r.report.straggler.rank if r.report.straggler else None
        for s in r.report.ranks:
            rows.append({
                "run": r.run_id, "rank": s.rank, "node": s.node, "local_rank": s.local_rank, "device": s.device,
                "pid": s.pid, "steps": s.steps, "step_now_ms": _ms(s.step_now_s),
                "step_median_ms": _ms(s.step_median_s), "step_p95_ms": _ms(s.step_p95_s),
                "data_pct": _pct(s.data_share), "collective_pct": _pct(s.collective_share),
                "mark": "slowest" if s.rank == slow else "",
            })
    return rows


def render_ranks(runs: list[RankedRun], fmt: str) -> str:
    """The RANKS section of a table or markdown report ("" when no run has ranks)."""
    from perfwatch.core.results.summary import _markdown, _table

    if not runs:
        return ""
    rows = rank_rows(runs)
    findings = [line for r in runs for line in r.findings()]
    if fmt == "markdown":
        return ("## Ranks\n\n" + _markdown(rows, RANK_COLUMNS)
                + "".join(f"\n- {line}" for line in findings))
    return "RANKS\n" + _table(rows, RANK_COLUMNS) + "".join(f"\n{line}" for line in findings)


def ranks_json(runs: list[RankedRun]) -> dict[str, Any]:
    """Per run: its rank rows and findings, for `report --format json`."""
    return {r.run_id: {"ranks": rank_rows([r]), "straggler": (
        None if r.report.straggler is None else {"rank": r.report.straggler.rank, "excess": r.report.straggler.excess,
                                                   "cause": r.report.straggler.cause}),
        "findings": r.findings()} for r in runs}
