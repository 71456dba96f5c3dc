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
`report` show the same number for the same telemetry.jsonl. A run sampled on compute nodes (Slurm) has
one file per node; its energy is that of every GPU of every node, and each node's share is computed
the same way over that node's GPUs.
"""

from __future__ import annotations

import bisect
import json
import math
import operator
from array import array
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from perfwatch.core.ingest.sanitize import finite
from perfwatch.core.ingest.tail import FileTail
from perfwatch.core.layout import telemetry_node
from perfwatch.core.measure.mfu import PeakRecords
from perfwatch.core.model.view import RunView
from perfwatch.core.telemetry.jsonl import TelemetryFiles, field

COUNTER = "energy counter"
POWER = "power integrated over time (no energy counter)"
# how each method is named next to a number on screen ("1.20 kJ (NVML counter)")
HOW = {COUNTER: "NVML counter", POWER: "∫power, estimated"}


def how(method: str) -> str:
    """A method, short, as every front end names it: "NVML counter", "∫power, estimated", or both."""
    return " + ".join(HOW.get(m, m) for m in method.split(" + "))


_Series = dict[Any, "_Gpu"]
# per GPU its readings: `add_readings` fills it. A GPU is known by its uuid, else by its index (on a compute
# node: by the node and its index), so each GPU's readings come from one telemetry file
Readings = _Series


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


class _Gpu:
    """One GPU's readings in time order, columns of floats: its energy counter (time, mJ), its power
    (time, W) with the running trapezoidal integral of power (`power_j[i]` = J from `power_t[0]` to
    `power_t[i]`), so a window's energy costs two bisections, however long the run (a 10-hour 8-GPU run has 288,000
    readings, and the live view asks every 2 s). Readings with equal times keep the order they came in."""

    __slots__ = ("counter_t", "counter_mj", "power_t", "power_w", "power_j", "first", "last", "monotonic")

    def __init__(self) -> None:
        self.counter_t, self.counter_mj = array("d"), array("d")
        self.power_t, self.power_w, self.power_j = array("d"), array("d"), array("d")
        self.first = self.last = math.nan
        self.monotonic = True  # the counter never went backwards (a driver reload resets it)

    def add(self, t: float, e: float | None, p: float | None) -> None:
        if math.isnan(self.first):
            self.first = self.last = t
        self.first, self.last = min(self.first, t), max(self.last, t)
        if e is not None:
            if _put(self.counter_t, self.counter_mj, t, e):
                self.monotonic = self.monotonic and (len(self.counter_mj) < 2 or e >= self.counter_mj[-2])
            else:
                self.monotonic = all(map(operator.le, self.counter_mj, self.counter_mj[1:]))
        if p is not None:
            power_t, power_w = self.power_t, self.power_w
            if _put(power_t, power_w, t, p):
                if len(power_t) > 1:
                    self.power_j.append(self.power_j[-1] + (t - power_t[-2]) * (power_w[-2] + p) / 2)
                else:
                    self.power_j.append(0.0)
            else:  # the same sums, in the same order, as if the readings had come in time order
                self.power_j = array("d", [0.0])
                for i in range(1, len(power_t)):
                    step = (power_t[i] - power_t[i - 1]) * (power_w[i - 1] + power_w[i]) / 2
                    self.power_j.append(self.power_j[-1] + step)

    def energy(self, a: float, b: float) -> tuple[float, str] | None:
        """Joules over [a, b] (within the readings' span) and how: the counter when it covers the window
        and never went backwards, else integrated power; None when neither covers it."""
        counter_t, power_t = self.counter_t, self.power_t
        if len(counter_t) >= 2 and self.monotonic and counter_t[0] <= a and counter_t[-1] >= b:
            counter_mj = self.counter_mj
            return (_interp(counter_t, counter_mj, b) - _interp(counter_t, counter_mj, a)) / 1000.0, COUNTER
        if len(power_t) < 2 or power_t[0] > a or power_t[-1] < b:
            return None
        power_w = self.power_w
        va, vb = _interp(power_t, power_w, a), _interp(power_t, power_w, b)
        # power_t[i:j]: the readings inside (a, b)
        i, j = bisect.bisect_right(power_t, a), bisect.bisect_left(power_t, b)
        if i >= j:
            return (b - a) * (va + vb) / 2, POWER
        inner = self.power_j[j - 1] - self.power_j[i]
        head = (power_t[i] - a) * (va + power_w[i]) / 2
        tail = (b - power_t[j - 1]) * (power_w[j - 1] + vb) / 2
        return head + inner + tail, POWER


def _put(ts: array[float], vs: array[float], t: float, v: float) -> bool:
    """Insert a reading after those at times <= t (equal times keep their arrival order); True when
    it went at the end (the common case: the file is in time order)."""
    k = bisect.bisect_right(ts, t)
    ts.insert(k, t)
    vs.insert(k, v)
    return k == len(ts) - 1


def _interp(ts: Sequence[float], vs: Sequence[float], t: float) -> float:
    """Value at `t` on the polyline through (ts, vs) (ts sorted); the ends' values outside their span."""
    i = bisect.bisect_left(ts, t)
    if i == 0:
        return vs[0]
    if i == len(ts):
        return vs[-1]
    t0, t1, v0, v1 = ts[i - 1], ts[i], vs[i - 1], vs[i]  # t0 < t <= t1
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def _number(x: object) -> float | None:
    """A reading from telemetry.jsonl: a number within the core's bounds (Infinity, 1e308 W: None)."""
    return finite(x)


def add_readings(out: _Series, rec: Mapping[str, Any]) -> bool:
    """Add one telemetry record's GPU readings to `out`; False when it has none (or no time)."""
    t = _number(rec.get("time"))
    if t is None:
        return False
    added = False
    node = rec.get("node")  # sampled on a compute node (Slurm): GPU indices repeat from node to node
    for g in rec.get("gpus") or ():
        if not isinstance(g, dict):
            continue
        key = g.get("uuid") or ((node, g.get("index")) if isinstance(node, str) and node else g.get("index"))
        gpu = out.get(key)
        if gpu is None:
            gpu = out[key] = _Gpu()
        gpu.add(t, finite(g.get("energy_mj"), 0.0), field(g, "power_w"))  # in range, else unknown
        added = True
    return added


def _gpu_series(records: Iterable[Mapping[str, Any]]) -> _Series:
    """Per GPU (uuid, else index): its readings, in time order."""
    out: _Series = {}
    for rec in records:
        add_readings(out, rec)
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
    for gpu in series.values():
        first, last = gpu.first, gpu.last
        a = max(start, first) if start is not None else first
        b = min(end, last) if end is not None else last
        if not b > a:
            continue
        got = gpu.energy(a, b)
        if got is None:
            continue
        total.append(got[0])
        methods.add(got[1])
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
    return readings_energy_columns(view, _gpu_series(records))


def readings_energy_columns(view: RunView, series: Readings) -> dict[str, Any]:
    """`energy_columns` from readings gathered with `add_readings` (a streaming pass, or a follower)."""
    e = _run_energy(view, series)
    ett, whole = e.to_train, e.whole
    return {
        "energy_to_train_kj": ett.energy.kj if ett else None,
        "samples_per_j": ett.samples_per_joule if ett else None,
        "energy_run_kj": whole.kj if whole else None,
        "energy_method": (ett.energy.method if ett else whole.method if whole else None),
        "energy_covered_s": ett.energy.covered_s if ett else None,
    }


class EnergyFollower:
    """One run's telemetry read as it grows, for the live view's energy (one thread only).

    The run's files are its telemetry.jsonl and, sampled on compute nodes (Slurm), each node's file
    beside it (`jsonl.TelemetryFiles`: a node that starts late is picked up), as `report` reads them.
    Keeps each GPU's (time, counter, power) readings only (three numbers a GPU a second), per file, and
    computes with the same code as `report` (`_run_energy`) over all of them: the run's energy is
    `report`'s number; `node_energy` is each node's share. It also keeps, per file, the records that
    name the run's GPU (`peak`: the MFU peak when no live sample gives it). Reading goes through the one
    file tailer, which starts over when a file is replaced (a restarted run's new attempt): only that
    file's readings are dropped, as are those of a file that is gone (kept aside as `.attempt-N.*`).
    Descriptors are released between polls, so following every run of a large campaign holds no file open.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._files = TelemetryFiles(path)
        self._tails: dict[Path, FileTail] = {}
        self._series: dict[Path, _Series] = {}  # per file, its GPUs' readings
        self._peaks: dict[Path, PeakRecords] = {}  # per file, the records naming its GPU
        self.version = 0  # increments when the readings (or the peak records) changed

    @property
    def peak(self) -> PeakRecords:
        """The peak records of the first file (telemetry.jsonl, then the nodes in order) that names a GPU,
        else of the first file with any."""
        peaks = [self._peaks[path] for path in sorted(self._peaks) if self._peaks[path].records]
        named = [p for p in peaks if p.named]
        return (named or peaks or [PeakRecords()])[0]

    def poll(self) -> bool:
        """Read what was appended; True when the readings changed. Unreadable lines are skipped
        (as `read_telemetry` skips them); a file that cannot be read yields nothing."""
        changed = False
        files = self._files.files()
        for gone in [path for path in self._tails if path not in files]:  # moved away (a restart keeps it aside)
            self._tails.pop(gone).close()
            changed = bool(self._series.pop(gone)) or bool(self._peaks.pop(gone).records) or changed
        for path in files:
            tail = self._tails.get(path)
            if tail is None:
                tail = self._tails[path] = FileTail(path)
                self._series[path], self._peaks[path] = {}, PeakRecords()
            series, peak = self._series[path], self._peaks[path]
            while (batch := tail.read()) is not None:
                if batch.reset and (series or peak.records):
                    series.clear()
                    peak = self._peaks[path] = PeakRecords()
                    changed = True
                for raw in batch.lines:
                    try:
                        obj = json.loads(raw)
                    except ValueError:
                        continue
                    if isinstance(obj, dict) and (add_readings(series, obj) | peak.add(obj)):
                        changed = True
            tail.release()
        if changed:
            self.version += 1
        return changed

    def energy(self, view: RunView) -> RunEnergy:
        """The run's energy over every file: `report`'s computation on the same readings."""
        merged: _Series = {}
        for series in self._series.values():
            merged.update(series)  # one GPU, one file (see `Readings`)
        return _run_energy(view, merged)

    def node_energy(self, view: RunView) -> dict[str, RunEnergy]:
        """Each compute node's share (node name -> its energy; "" for the run's own telemetry.jsonl),
        for the files that hold GPU readings."""
        out = {}
        for path, series in self._series.items():
            node = telemetry_node(path.name)
            if series and node is not None:
                out[node] = _run_energy(view, series)
        return out

    def close(self) -> None:
        for tail in self._tails.values():
            tail.close()
