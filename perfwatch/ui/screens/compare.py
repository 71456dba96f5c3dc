"""Compare runs side by side: their eval and throughput curves overlaid, and one table.

Opened from the main screen with `c` (the runs marked with space, else the selected run's group)
or from the campaign view (enter on a group). The runs are listed in run-id order (numbers in
ids counted as numbers: r2 before r10), and each run keeps one colour, its place in that order,
in both plots and in the table's marker. Each curve is drawn against the time since its own
run_start, so runs that started at different times overlay. The screen re-reads the engine's
latest snapshot once a second while it is open, and repaints only when it changed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from perfwatch.core.engine import LiveEngine, LiveSnapshot
from perfwatch.core.model.view import RunView
from perfwatch.ui.format import energy_cell, eta_cell, fmt_duration, fmt_rate, fmt_value
from perfwatch.ui.widgets.plot import Plot, PlotLine, dashed

COLUMNS = ("run", "state", "ttt/elapsed", "avg samp/s", "eval/target", "best", "ETA")  # + energy-to-train


def run_order(run_id: str) -> tuple[tuple[int, object], ...]:
    """Sort key of run ids, numbers as numbers ("…r2" before "…r10")."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", run_id) if part)


def short_label(run_id: str, others: Sequence[str]) -> str:
    """The shortest tail of the run id (by path parts) that tells it apart from the others."""
    parts = run_id.split("/")
    for n in range(1, len(parts) + 1):
        tail = "/".join(parts[-n:])
        if sum(1 for o in others if o == tail or o.endswith("/" + tail)) <= 1:
            return tail
    return run_id


class CompareScreen(Screen[None]):
    """Overlaid curves and a side-by-side table of the chosen runs."""

    DEFAULT_CSS = """
    CompareScreen { layout: vertical; background: $background; }
    CompareScreen #compare-title { height: 1; padding: 0 1; background: $panel; text-style: bold; }
    CompareScreen #compare-plots { height: 1fr; min-height: 6; }
    CompareScreen DataTable { height: auto; max-height: 45%; }
    """
    BINDINGS = [Binding("escape,q", "close", "back", id="compare.close")]

    def __init__(self, engine: LiveEngine, run_ids: Sequence[str], title: str = "") -> None:
        super().__init__()
        self.engine = engine
        self.run_ids = sorted(dict.fromkeys(run_ids), key=run_order)  # the order of the table and the colours
        self.heading = title or f"compare {len(self.run_ids)} runs"
        self._seq = -1
        self._energy_column = False

    def compose(self) -> ComposeResult:
        yield Static(self.heading, id="compare-title")
        with Horizontal(id="compare-plots"):
            yield Plot("eval", id="compare-eval", classes="eval")
            yield Plot("throughput", unit="samples/s", zero_based=True, id="compare-throughput")
        # the run marker keeps its colour on the cursor row
        yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=True, cursor_foreground_priority="renderable")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*COLUMNS)
        self._show()
        self.set_interval(1.0, self._show)

    def _show(self) -> None:
        snap = self.engine.snapshot
        if snap is None or snap.seq == self._seq:
            return
        self._seq = snap.seq
        views = [(rid, snap.views.get(rid)) for rid in self.run_ids]
        labels = {rid: short_label(rid, self.run_ids) for rid in self.run_ids}
        evals, rates = [], []
        target = None
        for colour, (rid, v) in enumerate(views):
            if v is None:
                continue
            start = v.run_start_ms if v.run_start_ms is not None else (v.first_time_ms or 0.0)
            evals.append(PlotLine(labels[rid], tuple((e.time_ms - start, e.value) for e in v.evals), colour))
            rates.append(PlotLine(labels[rid], tuple((t - start, r) for t, r in v.throughput), colour))
            if target is None and v.target is not None:
                target = v.target.value
        self.query_one("#compare-eval", Plot).set_series(evals, target, start_ms=0.0)
        self.query_one("#compare-throughput", Plot).set_series(rates, start_ms=0.0)
        table = self.query_one(DataTable)
        if not self._energy_column and any(rid in snap.energy for rid in self.run_ids):
            self._energy_column = True  # only when some run has GPU energy (none on CPU-only runs)
            table.add_column("energy-to-train")
        table.clear()
        plot = self.query_one("#compare-eval", Plot)
        for colour, (rid, v) in enumerate(views):
            label, *cells = _cells(labels[rid], v, snap, rid)
            marked = Text.assemble(("┅ " if dashed(colour) else "━ ", plot.series_style(colour)), label)
            table.add_row(marked, *cells, *((energy_cell(snap.energy.get(rid)),) if self._energy_column else ()),
                          key=rid)

    def action_close(self) -> None:
        self.dismiss(None)


def _cells(label: str, view: RunView | None, snap: LiveSnapshot, run_id: str) -> tuple[str, ...]:
    status = snap.statuses.get(run_id)
    state = status.word if status is not None else "–"
    if view is None:
        return (label, state, "–", "–", "–", "–", "–")
    ttt = view.time_to_train_ms
    time_cell = fmt_duration(ttt if ttt is not None else view.elapsed_ms)
    figures = snap.figures.get(run_id)
    target = f"/{fmt_value(view.target.value)}" if view.target is not None else ""
    return (label, state, time_cell, fmt_rate(figures.tp_avg if figures is not None else None),
            f"{fmt_value(view.last_eval)}{target}", fmt_value(view.best_eval),
            eta_cell(view, snap.etas.get(run_id)))
