"""GPU energy of a run, from its telemetry.jsonl: energy-to-train (run_start -> run_stop) and samples per joule.

Why the counter first: NVML's total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ since
the driver loaded, Volta and newer) is integrated by the board itself at a far finer grain than a 1 Hz
power sample, so the difference of two readings is the energy in between, whatever the power did
between samples. Where a GPU has no counter (older boards, some VMs) or the counter went backwards
(a driver reload mid-run), the power readings are integrated over time instead (trapezoids), and the
result says so: at 1 Hz that misses anything shorter than a second.

Readings are interpolated linearly to the window's ends, so a run whose samples are a second apart
still gets its energy from run_start to run_stop, not from sample to sample. Only the part of the window
the samples cover is counted (`covered_s` says how much that is).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from perfwatch.core.model.view import RunView

COUNTER = "energy counter"
POWER = "power integrated over time (no energy counter)"


class Energy(msgspec.Struct, frozen=True):
    """Energy of the run's GPUs over a window, summed over GPUs."""

    joules: float
    gpus: int
    method: str  # COUNTER, POWER, or both joined by " + " when GPUs differ
    covered_s: float  # the part of the window the samples cover
    span_s: float  # the window asked for (run_start -> run_stop), or the samples' span

    @property
    def kj(self) -> float:
        return self.joules / 1000.0


class EnergyToTrain(msgspec.Struct, frozen=True):
    """From run_start to run_stop (or to the latest sample while the run trains)."""

    energy: Energy
    samples: float | None
    finished: bool  # True once run_stop is logged

    @property
    def samples_per_joule(self) -> float | None:
        if self.samples is None or self.energy.joules <= 0:
            return None
        return self.samples / self.energy.joules


def _interp(points: Sequence[tuple[float, float]], t: float) -> float:
    """Value at `t` on the polyline through `points` (sorted by time, t within their span)."""
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1] if t >= points[-1][0] else points[0][1]


def _integrate(points: Sequence[tuple[float, float]], a: float, b: float) -> float:
    """Trapezoidal integral of the polyline over [a, b] (a, b within the points' span)."""
    inner = [(t, v) for t, v in points if a < t < b]
    path = [(a, _interp(points, a)), *inner, (b, _interp(points, b))]
    return math.fsum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in zip(path, path[1:], strict=False))


def _gpu_series(records: Iterable[Mapping[str, Any]]) -> dict[Any, list[tuple[float, float | None, float | None]]]:
    """Per GPU (uuid, else index): (time, energy_mj, power_w) in time order."""
    out: dict[Any, list[tuple[float, float | None, float | None]]] = {}
    for rec in records:
        t = rec.get("time")
        if not isinstance(t, int | float) or isinstance(t, bool):
            continue
        for g in rec.get("gpus") or ():
            if not isinstance(g, dict):
                continue
            key = g.get("uuid") or g.get("index")
            e, p = g.get("energy_mj"), g.get("power_w")
            out.setdefault(key, []).append((
                float(t),
                float(e) if isinstance(e, int | float) and not isinstance(e, bool) else None,
                float(p) if isinstance(p, int | float) and not isinstance(p, bool) else None,
            ))
    for series in out.values():
        series.sort(key=lambda x: x[0])
    return out


def gpu_energy(records: Iterable[Mapping[str, Any]], start: float | None = None,
               end: float | None = None) -> Energy | None:
    """Energy of every GPU in `records` between `start` and `end` (epoch seconds; None = the samples'
    own first / last time). None when no GPU has two readings inside the window."""
    series = _gpu_series(records)
    total: list[float] = []
    methods: set[str] = set()
    covered = 0.0
    span = 0.0
    for samples in series.values():
        first, last = samples[0][0], samples[-1][0]
        a = max(start, first) if start is not None else first
        b = min(end, last) if end is not None else last
        if b <= a:
            continue
        counter = [(t, e) for t, e, _ in samples if e is not None]
        monotonic = all(v1 >= v0 for (_, v0), (_, v1) in zip(counter, counter[1:], strict=False))
        if len(counter) >= 2 and monotonic and counter[0][0] <= a and counter[-1][0] >= b:
            total.append((_interp(counter, b) - _interp(counter, a)) / 1000.0)
            methods.add(COUNTER)
        else:
            power = [(t, p) for t, _, p in samples if p is not None]
            if len(power) < 2 or power[0][0] > a or power[-1][0] < b:
                continue
            total.append(_integrate(power, a, b))
            methods.add(POWER)
        covered = max(covered, b - a)
        span = max(span, (end if end is not None else last) - (start if start is not None else first))
    if not total:
        return None
    method = COUNTER if methods == {COUNTER} else POWER if methods == {POWER} else f"{COUNTER} + {POWER}"
    return Energy(math.fsum(total), len(total), method, covered, span)


def energy_to_train(view: RunView, records: Iterable[Mapping[str, Any]]) -> EnergyToTrain | None:
    """GPU energy from the log's run_start to its run_stop (to the latest sample while it trains)."""
    if view.run_start_ms is None:
        return None
    end = view.run_stop_ms / 1000.0 if view.run_stop_ms is not None else None
    energy = gpu_energy(records, view.run_start_ms / 1000.0, end)
    if energy is None:
        return None
    return EnergyToTrain(energy, view.samples, view.run_stop_ms is not None)


def energy_columns(view: RunView, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`report` columns: energy-to-train (kJ), samples per joule, whole-run GPU energy, and how measured."""
    ett = energy_to_train(view, records)
    whole = gpu_energy(records)
    return {
        "energy_to_train_kj": ett.energy.kj if ett else None,
        "samples_per_j": ett.samples_per_joule if ett else None,
        "energy_run_kj": whole.kj if whole else None,
        "energy_method": (ett.energy.method if ett else whole.method if whole else None),
        "energy_covered_s": ett.energy.covered_s if ett else None,
    }
