"""Presentation only: turn a `RunView` (and the controller's `ProcInfo`) into table cells.

Numbers are computed in `perfwatch.core`; this module chooses units, widths and the
status class whose colour the theme provides.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfwatch.core.control.controller import ProcInfo
from perfwatch.core.control.states import RunState
from perfwatch.core.measure.eta import Eta
from perfwatch.core.measure.eta import progress as run_progress
from perfwatch.core.model.run import RunView
from perfwatch.text.escape import scrub

if TYPE_CHECKING:
    from perfwatch.core.measure.energy import RunEnergy
    from perfwatch.core.measure.mfu import Overrides
    from perfwatch.core.telemetry.types import Snapshot

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
STATUS_CLASSES = ("queued", "running", "paused", "reached", "done", "failed", "stalled")
_SYMBOL = {
    "queued": "·", "running": "▶", "paused": "‖", "reached": "✓",
    "done": "■", "failed": "✗", "stalled": "!",
}
_FAILED = frozenset({RunState.FAILED, RunState.KILLED, RunState.TIMEOUT, RunState.STOPPED, RunState.UNKNOWN})


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


def status_of(view: RunView | None, proc: ProcInfo | None) -> tuple[str, str]:
    """(status class, label) from the process state when controlled, else from the log."""
    if proc is not None:
        state = proc.state
        if proc.stalled or state is RunState.STALLED:
            return "stalled", "stalled"
        if state in (RunState.QUEUED, RunState.STARTING):
            return "queued", state.value
        if state is RunState.PAUSED:
            return "paused", "paused"
        if state in _FAILED:
            return "failed", state.value
        if state is RunState.SUCCEEDED:
            reached = view is not None and view.target_reached
            return ("reached" if reached else "done"), "done"
        if view is not None and view.target_reached:
            return "reached", state.value
        return "running", state.value
    if view is None:
        return "queued", "waiting"
    if view.phase == "stopped":
        if view.run_status == "success":
            return ("reached" if view.target_reached or view.target is None else "done"), "success"
        return "failed", view.run_status or "stopped"
    if view.target_reached:
        return "reached", view.phase
    if view.phase == "waiting":
        return "queued", "waiting"
    return "running", view.phase


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
    """Time to the target from the eval curve's fit ("≈3:20 ±0:40", "≥16:00", "not converging")."""
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


def mfu_for(view: RunView | None, proc: ProcInfo | None, snapshot: Snapshot | None,
            overrides: Overrides | None = None) -> float | None:
    """MFU (0..1) as every front end shows it: THE peak resolver (core/measure/mfu.py) given the run's
    live GPU sample; a CPU run only against a peak this host measured before (the live view never
    measures: it would steal the runs' cores); None if unknown."""
    if view is None:
        return None
    from perfwatch.core.measure.mfu import run_mfu

    devices = proc.devices if proc is not None else ()
    gpus = snapshot.gpu.gpus if snapshot is not None and snapshot.gpu is not None else ()
    gpu = next((g for g in gpus if devices and g.index == devices[0]), gpus[0] if gpus else None)
    return run_mfu(view, overrides=overrides, gpu=gpu, cpu="cached", scheduled_devices=len(devices) or None).value


def make_row(run_id: str, view: RunView | None, proc: ProcInfo | None = None, mfu: float | None = None,
             eta: Eta | None = None, energy: RunEnergy | None = None) -> Row:
    status, label = status_of(view, proc)
    label = f"{_SYMBOL[status]} {label}"
    shown_id = scrub(run_id)  # a run id is a file or folder name: it may hold control characters
    if view is None:
        cells = {k: "–" for k, _, _ in COLUMNS}
        cells.update(id=shown_id, state=label)
        return Row(run_id, cells, status, {"id": run_id, "state": status})
    prog, prog_key = progress(view)
    ttt = view.time_to_train_ms
    time_cell = fmt_duration(view.elapsed_ms) if ttt is None else f"{fmt_duration(ttt)} ✓"
    if ttt is not None and view.run_status != "success":
        time_cell = fmt_duration(ttt)
    cells = {
        "id": shown_id,
        "state": label,
        "progress": prog,
        "tp_now": fmt_rate(view.last_throughput),
        "tp_avg": fmt_rate(view.throughput_stats.mean if view.throughput_stats.count else None),
        "mfu": "–" if mfu is None else (f"{mfu * 100:.1f}%" if mfu < 0.1 else f"{mfu * 100:.0f}%"),
        "eval": eval_cell(view),
        "time": time_cell,
        "energy": energy_cell(energy),
        "eta": eta_cell(view, eta),
    }
    sort = {
        "id": run_id,
        "state": STATUS_CLASSES.index(status),
        "progress": prog_key,
        "tp_now": view.last_throughput or 0.0,
        "eval": view.last_eval if view.last_eval is not None else -math.inf,
        "time": view.elapsed_ms or 0.0,
    }
    return Row(run_id, cells, status, sort)


def header_text(title: str, host: Mapping[str, Any] | None, statuses: Iterable[str]) -> str:
    """`perfwatch · <campaign>  <host>  N runs  n <status> ...` for the header bar."""
    counts = Counter(statuses)
    name = (host or {}).get("hostname") or (host or {}).get("name") or ""
    parts = [f"perfwatch · {title}", name, f"{sum(counts.values())} runs"]
    parts += [f"{n} {s}" for s, n in sorted(counts.items())]
    return "  ".join(p for p in parts if p)
