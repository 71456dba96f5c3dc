"""Presentation only: turn a `RunView` and what the engine computed for it into table cells.

Numbers and states are computed in `perfwatch.core` (the engine's snapshot: status, throughput,
MFU, ETA, energy); this module chooses units, widths and symbols; the theme colours each status
class (core/model/status.py `KINDS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfwatch.core.measure.eta import Eta
from perfwatch.core.measure.eta import progress as run_progress
from perfwatch.core.model.run import RunView
from perfwatch.core.model.status import KINDS, Counts, RunStatus
from perfwatch.text.escape import scrub

if TYPE_CHECKING:
    from perfwatch.core.engine import RunFigures
    from perfwatch.core.measure.energy import RunEnergy

COLUMNS: tuple[tuple[str, str, int], ...] = (
    # (key, title, width); "id" takes the remaining width
    ("id", "run", 0),
    ("state", "state", 10),
    ("progress", "progress", 9),
    ("tp_now", "samp/s", 9),
    ("tp_avg", "avg", 9),
    ("mfu", "MFU", 6),
    ("eval", "eval/target", 16),
    ("time", "ttt/elapsed", 11),
    ("energy", "energy", 9),
    ("eta", "ETA", 14),
)
NARROW_HIDE = ("tp_avg", "mfu", "eta", "energy")  # dropped first when the terminal is narrow
OPTIONAL = ("energy",)  # shown only while some run has a value (GPU energy: none on CPU-only runs)
STATUS_CLASSES = KINDS
_SYMBOL = {
    "queued": "·", "running": "▶", "paused": "‖", "reached": "✓",
    "done": "■", "failed": "✗", "stalled": "!",
}
# the state cell of a run while an action asked for it has not taken effect yet (fits the state column)
PENDING_WORDS = {"pause": "pausing…", "resume": "resuming…", "stop": "stopping…", "kill": "killing…",
                 "restart": "restart…", "start_now": "starting…"}


@dataclass(frozen=True, slots=True)
class Row:
    """One formatted runs-table row plus the values used to sort it."""

    run_id: str
    cells: dict[str, str]
    status: str  # one of STATUS_CLASSES
    sort: dict[str, Any]


def fmt_duration(ms: float | None) -> str:
    if ms is None or not math.isfinite(ms):
        return "–"
    if ms < 10_000:  # short CPU runs: "0:00" would hide the difference between 0.3 s and 9 s
        return f"{ms / 1000:.1f}s"
    s = int(ms // 1000)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fmt_rate(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "–"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.4g}"


def fmt_per_s(v: float | None, unit: str) -> str:
    """A throughput cell: samples/s as a number, tokens/s marked `tok` (the column says samp/s)."""
    text = fmt_rate(v)
    return f"{text} tok" if unit == "tokens" and text != "–" else text


def rate_name(unit: str) -> str:
    """`samp/s` or `tok/s`: what a run's throughput counts."""
    return "tok/s" if unit == "tokens" else "samp/s"


def fmt_value(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "–"
    return f"{v:.4g}"


def fmt_energy(kj: float | None) -> str:
    """kJ as the live view shows it: "0.05 kJ", "12.3 kJ", "999 kJ", "1.23 MJ"."""
    if kj is None or not math.isfinite(kj):
        return "–"
    if kj >= 1000:
        return f"{kj / 1000:.2f} MJ"
    return f"{kj:.2f} kJ" if kj < 10 else f"{kj:.1f} kJ" if kj < 100 else f"{kj:.0f} kJ"


def energy_cell(energy: RunEnergy | None) -> str:
    """The runs table's energy: GPU energy-to-train (so far, while the run trains); "–" without one."""
    ett = energy.to_train if energy is not None else None
    return fmt_energy(ett.energy.kj) if ett is not None else "–"


def energy_text(energy: RunEnergy | None) -> str:
    """The detail line: energy-to-train, how it was measured, samples per joule, the whole run's energy."""
    if energy is None:
        return ""
    parts = []
    ett, whole = energy.to_train, energy.whole
    if ett is not None:
        name = "energy-to-train" if ett.finished else "energy so far"
        parts.append(f"{name} {fmt_energy(ett.energy.kj)} ({ett.energy.how})")
        spj = ett.samples_per_joule
        if spj is not None:
            parts.append(f"{spj:.3g} samples/J")
    if whole is not None and (ett is None or fmt_energy(whole.kj) != fmt_energy(ett.energy.kj)):
        parts.append(f"whole run {fmt_energy(whole.kj)}" + ("" if ett is not None else f" ({whole.how})"))
    return " · ".join(parts)


def status_label(status: RunStatus) -> str:
    """The state cell: the status class's symbol and the state word ("✓ stopped", "✗ crashed")."""
    return f"{_SYMBOL[status.kind]} {status.word}"


def progress(view: RunView) -> tuple[str, float]:
    """Against the budget the log names (core/measure/eta.py), else where the run is: never a share
    of `train_samples` (MLPerf's dataset size, not a budget)."""
    p = run_progress(view)
    frac = p.fraction
    if frac is not None:
        return (f"{frac * 100:.1f}%" if frac < 0.1 else f"{frac * 100:.0f}%"), frac
    if p.done is None:
        return "–", -1.0
    if p.unit == "epoch":
        return f"ep {p.done:g}", p.done
    return fmt_rate(p.done), p.done


def eta_cell(view: RunView, eta: Eta | None) -> str:
    """Time to the target from the eval curve's fit ("≈3:20 ±0:40", "≥16:00", "not converging"); the
    engine gives an ended run none."""
    if eta is None or view.phase == "stopped":
        return "–"
    return eta.text(view.elapsed_ms, fmt_eta)


def fmt_eta(ms: float | None) -> str:
    if ms is None or not math.isfinite(ms):
        return "–"
    return fmt_duration(ms) if ms >= 10_000 else f"{ms / 1000:.0f}s"


def eval_cell(view: RunView) -> str:
    last = fmt_value(view.last_eval)
    if view.target is None:
        return last
    mark = " ✓" if view.target_reached else ""
    return f"{last}/{fmt_value(view.target.value)}{mark}"


def fmt_mfu(mfu: float | None) -> str:
    return "–" if mfu is None else (f"{mfu * 100:.1f}%" if mfu < 0.1 else f"{mfu * 100:.0f}%")


def make_row(run_id: str, view: RunView | None, status: RunStatus, figures: RunFigures | None = None,
             eta: Eta | None = None, energy: RunEnergy | None = None) -> Row:
    """One runs-table row from the engine's numbers for the run (nothing computed here)."""
    kind, label = status.kind, status_label(status)
    shown_id = scrub(run_id)  # a run id is a file or folder name: it may hold control characters
    if view is None:
        cells = {k: "–" for k, _, _ in COLUMNS}
        cells.update(id=shown_id, state=label)
        return Row(run_id, cells, kind, {"id": run_id, "state": STATUS_CLASSES.index(kind)})
    prog, prog_key = progress(view)
    ttt = view.time_to_train_ms
    time_cell = fmt_duration(view.elapsed_ms) if ttt is None else f"{fmt_duration(ttt)} ✓"
    if ttt is not None and view.run_status != "success":
        time_cell = fmt_duration(ttt)
    tp_now = figures.tp_now if figures is not None else None
    unit = figures.unit if figures is not None else "samples"
    mfu = figures.mfu.value if figures is not None and figures.mfu is not None else None
    cells = {
        "id": shown_id,
        "state": label,
        "progress": prog,
        "tp_now": fmt_per_s(tp_now, unit),
        "tp_avg": fmt_per_s(figures.tp_avg if figures is not None else None, unit),
        "mfu": fmt_mfu(mfu),
        "eval": eval_cell(view),
        "time": time_cell,
        "energy": energy_cell(energy),
        "eta": eta_cell(view, eta),
    }
    sort = {
        "id": run_id,
        "state": STATUS_CLASSES.index(kind),
        "progress": prog_key,
        "tp_now": tp_now or 0.0,
        "eval": view.last_eval if view.last_eval is not None else -math.inf,
        "time": view.elapsed_ms or 0.0,
    }
    return Row(run_id, cells, kind, sort)


def pending_row(row: Row, verb: str) -> Row:
    """The row while the action `verb` asked for it has not taken effect: its state says what is coming."""
    return Row(row.run_id, {**row.cells, "state": PENDING_WORDS[verb]}, row.status, row.sort)


def header_text(title: str, host: Mapping[str, Any] | None, counts: Counts | None) -> str:
    """`perfwatch · <campaign>  <host>  N runs  n <state> ...  target: n reached, n to go, n not reached, n no target
    n failed` for the header bar: the engine's counts (core/model/status.py), only formatted."""
    name = (host or {}).get("hostname") or (host or {}).get("name") or ""
    parts = [f"perfwatch · {title}", name]
    if counts is not None:
        parts.append(f"{counts.runs} runs")
        parts += [f"{n} {state}" for state, n in counts.states.items()]
        verdicts = counts.target_text()
        if verdicts:
            parts.append(f"target: {verdicts}")
        if counts.failed:
            parts.append(f"{counts.failed} failed")
    return "  ".join(p for p in parts if p)
