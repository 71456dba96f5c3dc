"""The campaign view: one row per run group (a results folder or a job's repeats), live.

Rows come from `core/results/groups.py` (olympic score so far × scaling.json, runs done and
converged against MLPerf's count, energy-to-train, speed-up against the baseline group with its
bootstrap interval), computed in a worker thread (the bootstrap and mlperf_logging's tables cost
about a second the first time), again at most every `REFRESH_S` while the runs change.
`b` makes the highlighted group the baseline; enter compares its runs.
"""

from __future__ import annotations

import time

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from perfwatch.core.engine import LiveEngine
from perfwatch.core.results.groups import GroupRow, group_rows, group_runs
from perfwatch.ui.screens.compare import CompareScreen

REFRESH_S = 5.0
COLUMNS = ("group", "benchmark", "stopped/runs", "converged/needed", "score (min)", "vs baseline", "energy",
           "RCP", "note")


def row_cells(r: GroupRow) -> tuple[str, ...]:
    needed = f"/{r.needed}" if r.needed else ""
    score = f"{r.score_minutes:.2f}" if r.score_minutes is not None else "–"
    if r.is_baseline:
        vs = "baseline"
    elif r.speedup is not None:
        vs = f"×{r.speedup:.2f}" + (f" [{r.interval[0]:.2f}–{r.interval[1]:.2f}]" if r.interval else "")
    else:
        vs = "–"
    # perfwatch's own NVML energy-to-train and the MLPerf power logs' energy score, each said as measured
    energies = [f"{r.energy_kj:.0f} kJ NVML"] if r.energy_kj is not None else []
    if r.energy_score_j is not None:
        energies.append(f"{r.energy_score_j / 1e3:.0f} kJ score (power logs)")
    elif r.energy_note:
        energies.append(f"power logs: {r.energy_note}")
    energy = ", ".join(energies) or "–"
    bench = f"{r.benchmark} (stand-in)" if r.stands_for is not None else r.benchmark or "–"
    return (r.group, bench, f"{r.stopped}/{r.runs}", f"{r.converged}{needed}", score, vs, energy,
            r.rcp or "–", r.note)


class GroupsScreen(Screen[None]):
    """Groups of runs with their scores so far."""

    DEFAULT_CSS = """
    GroupsScreen { layout: vertical; background: $background; }
    GroupsScreen #groups-title { height: 1; padding: 0 1; background: $panel; text-style: bold; }
    GroupsScreen DataTable { height: 1fr; }
    GroupsScreen #groups-detail { height: 2; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    GroupsScreen #groups-hint { height: 1; padding: 0 1; color: $muted; }
    """
    BINDINGS = [
        Binding("escape,q", "close", "back", id="groups.close"),
        Binding("enter", "compare", "compare runs", id="groups.compare"),
        Binding("b", "baseline", "set baseline", id="groups.baseline"),
    ]

    def __init__(self, engine: LiveEngine, baseline: str | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.baseline = baseline
        self.rows: list[GroupRow] = []
        self._key: tuple[tuple[str, int, str], ...] | None = None
        self._last = 0.0

    def compose(self) -> ComposeResult:
        yield Static("campaign: run groups (olympic score so far, MLPerf's run count, baseline ratio)",
                     id="groups-title")
        yield DataTable(id="groups-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="groups-detail")
        yield Static("computing…", id="groups-hint")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        self._refresh()
        self.set_interval(1.0, self._refresh)

    def _refresh(self, force: bool = False) -> None:
        snap = self.engine.snapshot
        if snap is None:
            return
        # the runs themselves, not the snapshot's sequence: a device sample or an energy update publishes
        # a new snapshot with the same views, and recomputing the groups (a bootstrap each) for it is waste
        key = tuple((rid, v.version, snap.statuses[rid].word if rid in snap.statuses else "")
                    for rid, v in snap.views.items())
        if not force and (key == self._key or time.monotonic() - self._last < REFRESH_S):
            return
        self._key, self._last = key, time.monotonic()
        self._compute(snap.views, self.baseline, snap.statuses)

    @work(thread=True, exclusive=True)
    def _compute(self, views: object, baseline: str | None, statuses: object) -> None:
        rows = group_rows(views, baseline, statuses)  # type: ignore[arg-type]
        self.app.call_from_thread(self._show, rows)

    def _show(self, rows: list[GroupRow]) -> None:
        self.rows = rows
        table = self.query_one(DataTable)
        keep = table.cursor_row
        table.clear()
        for r in rows:
            table.add_row(*row_cells(r), key=r.group)
        if rows:
            table.move_cursor(row=min(keep, len(rows) - 1))
        hint = "enter: compare the group's runs · b: make it the baseline · escape: back"
        self.query_one("#groups-hint", Static).update(hint if rows else "no runs yet")

    def _highlighted(self) -> str | None:
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row < 0:
            return None
        return self.rows[min(table.cursor_row, len(self.rows) - 1)].group

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The highlighted group's long texts in full (the table cuts them)."""
        i = event.cursor_row
        if 0 <= i < len(self.rows):
            r = self.rows[i]
            judged = f" as {r.stands_for.describe()} (the campaign's mlperf:)" if r.stands_for is not None else ""
            text = f"{r.group}\nRCP{judged}: {r.rcp or '–'}" + (f"  ·  {r.note}" if r.note else "")
            self.query_one("#groups-detail", Static).update(text)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_compare()

    def action_baseline(self) -> None:
        group = self._highlighted()
        if group is not None:
            self.baseline = group
            self._refresh(force=True)

    def action_compare(self) -> None:
        group = self._highlighted()
        snap = self.engine.snapshot
        if group is None or snap is None:
            return
        members = group_runs(snap.views.values()).get(group, [])
        self.app.push_screen(CompareScreen(self.engine, [v.run_id for v in members], title=f"compare: {group}"))

    def action_close(self) -> None:
        self.dismiss(None)
