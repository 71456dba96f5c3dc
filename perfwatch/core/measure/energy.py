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

One computation for every front end: `report` (`energy_columns`, over the records of the whole file)
and the live engine (`EnergyFollower`, which keeps only each GPU's (time, counter, power) readings as
the file grows) both end in `_run_energy` over the same per-GPU series, so the TUI, `--headless` and
`report` show the same number for the same telemetry.jsonl.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from perfwatch.core.ingest.tail import FileTail
from perfwatch.core.model.view import RunView

COUNTER = "energy counter"
POWER = "power integrated over time (no energy counter)"
# how each method is named next to a number on screen ("1.20 kJ (NVML counter)")
HOW = {COUNTER: "NVML counter", POWER: "∫power, estimated"}


def how(method: str) -> str:
    """A method, short, as every front end names it: "NVML counter", "∫power, estimated", or both."""
    return " + ".join(HOW.get(m, m) for m in method.split(" + "))


_Series = dict[Any, list[tuple[float, float | None, float | None]]]


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

    @property
    def how(self) -> str:
        return how(self.method)


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

    @property
    def complete(self) -> bool:
        """run_stop is logged and the samples reach it: the number will not change any more."""
        return self.finished and self.energy.covered_s >= self.energy.span_s


class RunEnergy(msgspec.Struct, frozen=True):
    """What the live view and `report` show about one run's GPU energy (None: not recorded)."""

    to_train: EnergyToTrain | None  # run_start -> run_stop (-> the latest sample while it trains)
    whole: Energy | None  # every sample of the run's telemetry


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


def _add_record(out: _Series, rec: Mapping[str, Any]) -> tuple[bool, bool]:
    """Append one telemetry record's GPU readings to `out`: (any added, all in time order)."""
    t = rec.get("time")
    if not isinstance(t, int | float) or isinstance(t, bool):
        return False, True
    added, in_order = False, True
    for g in rec.get("gpus") or ():
        if not isinstance(g, dict):
            continue
        key = g.get("uuid") or g.get("index")
        e, p = g.get("energy_mj"), g.get("power_w")
        samples = out.setdefault(key, [])
        in_order = in_order and (not samples or samples[-1][0] <= t)
        samples.append((
            float(t),
            float(e) if isinstance(e, int | float) and not isinstance(e, bool) else None,
            float(p) if isinstance(p, int | float) and not isinstance(p, bool) else None,
        ))
        added = True
    return added, in_order


def _sort(series: _Series) -> None:
    for samples in series.values():
        samples.sort(key=lambda x: x[0])  # stable: the same order whether read at once or as it grew


def _gpu_series(records: Iterable[Mapping[str, Any]]) -> _Series:
    """Per GPU (uuid, else index): (time, energy_mj, power_w) in time order."""
    out: _Series = {}
    for rec in records:
        _add_record(out, rec)
    _sort(out)
    return out


def gpu_energy(records: Iterable[Mapping[str, Any]], start: float | None = None,
               end: float | None = None) -> Energy | None:
    """Energy of every GPU in `records` between `start` and `end` (epoch seconds; None = the samples'
    own first / last time). None when no GPU has two readings inside the window."""
    return _series_energy(_gpu_series(records), start, end)


def _series_energy(series: _Series, start: float | None, end: float | None) -> Energy | None:
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
    return _to_train(view, _gpu_series(records))


def _to_train(view: RunView, series: _Series) -> EnergyToTrain | None:
    if view.run_start_ms is None:
        return None
    end = view.run_stop_ms / 1000.0 if view.run_stop_ms is not None else None
    energy = _series_energy(series, view.run_start_ms / 1000.0, end)
    if energy is None:
        return None
    return EnergyToTrain(energy, view.samples, view.run_stop_ms is not None)


def _run_energy(view: RunView, series: _Series) -> RunEnergy:
    return RunEnergy(_to_train(view, series), _series_energy(series, None, None))


def run_energy(view: RunView, records: Iterable[Mapping[str, Any]]) -> RunEnergy:
    """Energy-to-train and whole-run GPU energy of one run from its telemetry records."""
    return _run_energy(view, _gpu_series(records))


def energy_columns(view: RunView, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`report` columns: energy-to-train (kJ), samples per joule, whole-run GPU energy, and how measured."""
    e = run_energy(view, records)
    ett, whole = e.to_train, e.whole
    return {
        "energy_to_train_kj": ett.energy.kj if ett else None,
        "samples_per_j": ett.samples_per_joule if ett else None,
        "energy_run_kj": whole.kj if whole else None,
        "energy_method": (ett.energy.method if ett else whole.method if whole else None),
        "energy_covered_s": ett.energy.covered_s if ett else None,
    }


class EnergyFollower:
    """One run's telemetry.jsonl read as it grows, for the live view's energy (one thread only).

    Keeps each GPU's (time, counter, power) readings only (three numbers a GPU a second) and computes
    with the same code as `report` (`_run_energy`). Reading goes through the one file tailer, which
    starts over when the file is replaced (a restarted run's new attempt); the descriptor is released
    between polls, so following every run of a large campaign holds no file open.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tail = FileTail(path)
        self._series: _Series = {}
        self._sorted = True
        self.version = 0  # increments when the readings changed

    def poll(self) -> bool:
        """Read what was appended; True when the readings changed. Unreadable lines are skipped
        (as `read_telemetry` skips them); a file that cannot be read yields nothing."""
        changed = False
        while (batch := self._tail.read()) is not None:
            if batch.reset and self._series:
                self._series, self._sorted, changed = {}, True, True
            for raw in batch.lines:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    added, in_order = _add_record(self._series, obj)
                    changed = changed or added
                    self._sorted = self._sorted and in_order
        self._tail.release()
        if changed:
            self.version += 1
        return changed

    def energy(self, view: RunView) -> RunEnergy:
        if not self._sorted:
            _sort(self._series)
            self._sorted = True
        return _run_energy(view, self._series)

    def close(self) -> None:
        self._tail.close()
