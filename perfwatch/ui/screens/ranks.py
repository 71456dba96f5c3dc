"""The rank view: one distributed run expanded into its ranks, the straggler marked, stacks on one key.

Rows come from `core/telemetry/ranks.rank_report` (the computation `report` uses): per rank its node,
local rank, device and pid, step time now / median / p95, data-wait and collective shares, and its
GPU over the last minute (utilisation, SM clock, memory, clock-event reasons). The report is read in a
worker thread every REFRESH_S (rank files can be large). When the hang watchdog has captured the run's
stacks, the view opens on them (`x` hides or shows them): every rank's main-thread stack, the ranks
stuck outside a collective first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from perfwatch.core.telemetry.ranks import SLOWDOWN_REASONS, RankReport, rank_report

REFRESH_S = 2.0
COLUMNS = ("rank", "node", "local", "device", "pid", "steps", "step now", "median", "p95", "data %", "coll %",
           "GPU %", "SM MHz", "mem GiB", "slowdown", "")


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.1f} ms"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.0f}"


def rank_cells(report: RankReport) -> list[tuple[str, ...]]:
    """The table's rows for a rank report (pure: tested without an app)."""
    slow = report.straggler.rank if report.straggler else None
    rows: list[tuple[str, ...]] = []
    for s in report.ranks:
        g: Any = report.gpus.get(s.rank) or {}
        reasons = ", ".join(f"{SLOWDOWN_REASONS.get(r, r)} {share * 100:.0f}%"
                            for r, share in sorted((g.get("reasons") or {}).items(), key=lambda kv: -kv[1]))
        mark = "◀ slowest" if s.rank == slow else ("ended" if s.ended else "")
        rows.append((
            str(s.rank), s.node or "–", "–" if s.local_rank is None else str(s.local_rank), s.device or "–",
            "–" if s.pid is None else str(s.pid), str(s.steps), _ms(s.step_now_s), _ms(s.step_median_s),
            _ms(s.step_p95_s), _pct(s.data_share), _pct(s.collective_share),
            "–" if g.get("util") is None else f"{g['util']:.0f}",
            "–" if g.get("sm_clock") is None else f"{g['sm_clock']:.0f}",
            "–" if g.get("mem_used") is None else f"{g['mem_used'] / 2**30:.1f}",
            reasons or "–", mark,
        ))
    return rows


def stacks_text(capture: dict[str, Any] | None) -> str:
    """The newest capture as the stacks pane shows it: stuck ranks first, innermost frame first."""
    if capture is None:
        return "No stacks captured: the hang watchdog captures every rank's stacks once when the run stalls."
    stuck = set(capture.get("stuck_ranks") or [])
    lines = [str(capture.get("verdict") or "stalled"),
             f"stuck, not in a collective: {', '.join(map(str, sorted(stuck))) or 'none'}; "
             f"waiting in a collective: {', '.join(map(str, capture.get('waiting_ranks') or [])) or 'none'}"]
    lines += [str(x) for x in capture.get("flight_recorder") or []]
    ranks = sorted(capture.get("ranks") or [], key=lambda r: (r.get("rank") not in stuck, r.get("rank", 0)))
    for r in ranks:
        where = "STUCK" if r.get("rank") in stuck else "waiting"
        lines.append(f"\nrank {r.get('rank')} ({where}) pid {r.get('pid')} on {r.get('node')}: phase {r.get('phase')}")
        if r.get("error"):
            lines.append(f"  {r['error']}")
        for t in r.get("threads") or []:
            if t.get("name") != "MainThread" and len(r.get("threads") or []) > 1:
                continue
            lines += [f"  {f}" for f in t.get("frames") or []]
    return "\n".join(lines)


class RanksScreen(Screen[None]):
    """The ranks of one run, refreshed in a worker."""

    DEFAULT_CSS = """
    RanksScreen { layout: vertical; background: $background; }
    RanksScreen #ranks-title { height: 1; padding: 0 1; background: $panel; text-style: bold; }
    RanksScreen #ranks-finding { height: auto; max-height: 3; padding: 0 1; }
    RanksScreen DataTable { height: auto; max-height: 60%; }
    RanksScreen #ranks-stacks { height: 1fr; display: none; padding: 0 1; }
    RanksScreen.show-stacks #ranks-stacks { display: block; }
    """
    BINDINGS = [
        Binding("escape,q", "close", "back", id="ranks.close"),
        Binding("x", "stacks", "stacks", id="ranks.stacks"),
    ]

    def __init__(self, run_id: str, folder: Path) -> None:
        super().__init__()
        self.run_id, self.folder = run_id, folder
        self.report: RankReport | None = None
        self._stacks_chosen = False  # the user toggled the stacks pane: leave it as they chose

    def compose(self) -> ComposeResult:
        yield Static(f"ranks of {self.run_id}", id="ranks-title")
        yield Static("reading the rank files…", id="ranks-finding", markup=False)
        table: DataTable[str] = DataTable(cursor_type="row", zebra_stripes=True)
        table.add_columns(*COLUMNS)
        yield table
        with VerticalScroll(id="ranks-stacks"):
            yield Static("", id="ranks-stacks-text", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_report()
        self.set_interval(REFRESH_S, self.refresh_report)

    @work(thread=True, exclusive=True, group="ranks")
    def refresh_report(self) -> None:
        report = rank_report(self.folder)
        self.app.call_from_thread(self._show, report)

    def _show(self, report: RankReport | None) -> None:
        self.report = report
        finding = self.query_one("#ranks-finding", Static)
        table = self.query_one(DataTable)
        if report is None:
            finding.update("This run writes no rank files (perfwatch.instrument.ranks; workloads write them "
                           "under torchrun).")
            table.clear()
            return
        notes = []
        if report.straggler is not None:
            notes.append(f"straggler: {report.straggler.text}")
        capture = report.latest_capture()
        if capture is not None:
            notes.append(f"{capture.get('verdict')} — x: hide/show the stacks")
            if not self._stacks_chosen:  # a stalled run opens on its stacks
                self.add_class("show-stacks")
        finding.update("\n".join(notes) or f"{len(report.ranks)} ranks; no straggler")
        cursor = table.cursor_row
        table.clear()
        for row in rank_cells(report):
            table.add_row(*row)
        if report.ranks:
            table.move_cursor(row=min(cursor, len(report.ranks) - 1))
        self.query_one("#ranks-stacks-text", Static).update(stacks_text(capture))

    def action_stacks(self) -> None:
        self._stacks_chosen = True
        self.toggle_class("show-stacks")

    def action_close(self) -> None:
        self.app.pop_screen()
