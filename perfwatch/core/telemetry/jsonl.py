"""Per-run telemetry files: LOGDIR/<run>/telemetry.jsonl, one JSON object per sample.

A run's share of a snapshot is its process tree (CPU %, RSS) and its GPUs:
those named by its CUDA_VISIBLE_DEVICES indices, or, when it is not pinned, the
GPUs its processes are using. Written by the telemetry thread while the run
lives, so `attach` shows history and a finished run keeps its record; read back
tolerantly (a line cut short by a crash is skipped, never fatal).

Record (keys absent when unknown):
    {"time": 1732230000.5, "run": "mlp.bs32.r0", "cpu_percent": 187.5, "rss": 734003200,
     "nprocs": 3, "pids": [..], "gpus": [{"index": 0, "name": ..., "util_sm": 97.0, "mem_used": ..., "power_w": ...,
     "energy_mj": <NVML total-energy counter>, "throttle": ["sw_power_cap"],
     "run_pids": [<this run's processes on that GPU>], "run_mem": <bytes they use>,
     "other_procs": <processes on that GPU not in this run>, "na": {"field": "reason"}}],
     "gpu_unavailable": "NVML library not found: ...", "host_cpu_percent": 53.1, "host_mem_used": ...}

A Slurm run is sampled on each of its compute nodes (telemetry/node.py) into one file per node,
`telemetry.<node>.jsonl` (layout.node_telemetry_name), whose records carry `"node": "<node>"`.
`iter_telemetry` of a run reads all of its files; its summary is then the run's total (GPUs, power,
CPU and memory added over nodes; utilisation averaged over all GPUs) with each node's own summary
in `nodes`.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from perfwatch.core.ingest.sanitize import finite
from perfwatch.core.layout import TELEMETRY_FILE, node_telemetry_files
from perfwatch.core.telemetry.types import GpuSample, ProcTree, RunResources, Snapshot

_GPU_KEYS = (
    "name", "uuid", "board_part", "util_sm", "util_mem", "mem_used", "mem_total", "power_w", "power_limit_w",
    "power_default_limit_w", "temp_c", "sm_clock", "mem_clock", "energy_mj",
)


def _gpu_record(gpu: GpuSample, pids: set[int]) -> dict[str, Any]:
    rec: dict[str, Any] = {"index": gpu.index}
    for key in _GPU_KEYS:
        value = getattr(gpu, key)
        if value is not None:
            rec[key] = value
    if gpu.throttle is not None:
        rec["throttle"] = list(gpu.throttle)
    if gpu.processes is not None:
        mine = [p for p in gpu.processes if p.pid in pids]
        if mine:  # the run's own processes on this GPU (NVML compute/graphics processes in its tree)
            rec["run_pids"] = [p.pid for p in mine]
            rec["run_mem"] = sum(p.used_mem for p in mine if p.used_mem is not None)
        rec["other_procs"] = len(gpu.processes) - len(mine)  # > 0: the GPU is shared with something else
    if gpu.unavailable:
        rec["na"] = dict(gpu.unavailable)
    return rec


def select_gpus(snap: Snapshot, res: RunResources, tree: ProcTree | None) -> list[GpuSample]:
    """The run's GPUs: by its pinned indices, else those running any of its processes."""
    if snap.gpu is None or not snap.gpu.available:
        return []
    if res.gpu_indices is not None:
        wanted = set(res.gpu_indices)
        return [g for g in snap.gpu.gpus if g.index in wanted]
    pids = set(tree.pids if tree is not None else res.pids)
    return [g for g in snap.gpu.gpus if g.processes and any(p.pid in pids for p in g.processes)]


def run_record(snap: Snapshot, run_id: str, res: RunResources) -> dict[str, Any] | None:
    """The run's share of `snap`, or None when its processes are all gone (nothing to record)."""
    tree = snap.runs.get(run_id)
    if tree is not None and not tree.alive:
        return None
    rec: dict[str, Any] = {"time": round(snap.time, 3), "run": run_id}
    if tree is not None:
        rec["nprocs"] = len(tree.pids)
        rec["pids"] = list(tree.pids)
        if tree.cpu_percent is not None:
            rec["cpu_percent"] = round(tree.cpu_percent, 2)
        if tree.rss is not None:
            rec["rss"] = tree.rss
    pids = set(tree.pids) if tree is not None else set(res.pids)
    rec["gpus"] = [_gpu_record(g, pids) for g in select_gpus(snap, res, tree)]
    if snap.gpu is not None and not snap.gpu.available:
        rec["gpu_unavailable"] = snap.gpu.reason
    if snap.host is not None:
        if snap.host.cpu_percent is not None:
            rec["host_cpu_percent"] = round(snap.host.cpu_percent, 2)
        if snap.host.mem_used is not None:
            rec["host_mem_used"] = snap.host.mem_used
    return rec


def append_record(folder: Path, record: Mapping[str, Any], name: str = TELEMETRY_FILE) -> None:
    """Append one line; a single write() of a complete line, so readers never see half a record
    unless the process dies inside the write (then `read_telemetry` skips it)."""
    line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
    fd = os.open(folder / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def telemetry_files(path: str | Path) -> list[Path]:
    """A run's telemetry files: its folder or its telemetry.jsonl -> that file and the per-node files
    beside it (Slurm); any other file alone."""
    p = Path(path)
    if p.is_dir():
        p = p / TELEMETRY_FILE
    return [p, *node_telemetry_files(p.parent)] if p.name == TELEMETRY_FILE else [p]


class TelemetryFiles:
    """A run's telemetry files (`telemetry_files`) as they appear, for a reader that asks again and again
    (the live engine asks for every run every 2 s): the folder is listed again only when its modification
    time changed (a node's file was created), so asking costs one `stat`. A listing taken within
    `RECHECK_S` of that time is repeated at the next call: a file created in the same tick of the file
    system's clock (or seen late through NFS's attribute cache) leaves the time as it was."""

    RECHECK_S = 2.0

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._mtime: int | None = None
        self._sure = False
        self._files: list[Path] = [self.path]

    def files(self) -> list[Path]:
        if self.path.name != TELEMETRY_FILE:
            return self._files  # any other file alone (`telemetry_files`)
        try:
            mtime = os.stat(self.path.parent).st_mtime_ns
        except OSError:
            return self._files  # no folder (yet): its telemetry.jsonl, when it comes
        if mtime != self._mtime or not self._sure:
            listed_at = time.time()
            self._files = telemetry_files(self.path)
            self._mtime, self._sure = mtime, listed_at - mtime / 1e9 >= self.RECHECK_S
        return self._files


def iter_telemetry(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a run's telemetry (`telemetry_files`) one at a time, in a streaming pass: read in
    bounded batches through the file tailer (a line longer than the tailer's limit is cut, so it does
    not parse), never a whole file at once; truncated or garbled lines are skipped."""
    for p in telemetry_files(path):
        yield from _iter_file(p)


def _iter_file(p: Path) -> Iterator[dict[str, Any]]:

    from perfwatch.core.ingest.tail import FileTail

    tail = FileTail(p)
    try:
        while (batch := tail.read()) is not None:
            for raw in batch.lines:
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    yield obj
    finally:
        tail.close()


def read_telemetry(path: str | Path) -> list[dict[str, Any]]:
    """All records of a run's telemetry (`telemetry_files`); truncated or garbled lines are skipped."""
    return list(iter_telemetry(path))


class TelemetrySummary(msgspec.Struct, frozen=True):
    """What a report shows per run. GPU figures are over the run's GPUs; None = never measured."""

    samples: int
    duration_s: float | None
    gpus: int
    gpu_util_mean: float | None  # percent, mean over samples and GPUs
    gpu_util_max: float | None
    gpu_mem_max: int | None  # bytes, highest used memory seen on any of the run's GPUs
    power_mean_w: float | None  # sum over the run's GPUs, mean over samples
    power_max_w: float | None
    cpu_mean: float | None  # process-tree CPU %, 100 = one core
    cpu_max: float | None
    rss_max: int | None
    gpu_unavailable: str | None  # why there is no GPU data, when there is none
    run_mem_max: int | None = None  # bytes: the run's own processes, summed over its GPUs, highest tick
    shared_max: int = 0  # most processes outside the run seen on its GPUs in one tick (0 = not shared)
    throttle: Mapping[str, float] | None = None  # clock-event reason -> share of samples it was active
    gpu_indices: tuple[int, ...] = ()
    nodes: Mapping[str, TelemetrySummary] | None = None  # per compute node (Slurm), when sampled on nodes


class _Stat:
    """Count, exact sum and maximum of a stream of floats. The sum keeps Shewchuk's partials (math.fsum's
    algorithm), so `mean` is exactly `fsum(all values) / count` without holding the values."""

    __slots__ = ("n", "partials", "max")

    def __init__(self) -> None:
        self.n = 0
        self.partials: list[float] = []
        self.max: float | None = None

    def add(self, x: float) -> None:
        self.n += 1
        self.max = x if self.max is None or x > self.max else self.max
        i = 0
        partials = self.partials
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]

    @property
    def mean(self) -> float | None:
        return math.fsum(self.partials) / self.n if self.n else None


# what a telemetry field can physically be; a value read from disk outside it (Infinity, 1e308 watts, a
# negative percentage) is unknown, so no sum or mean can overflow or mislead
BOUNDS: dict[str, tuple[float, float]] = {
    "util_sm": (0.0, 100.0), "power_w": (0.0, 1e5), "cpu_percent": (0.0, 1e7), "mem_used": (0.0, 1e15),
    "run_mem": (0.0, 1e15), "rss": (0.0, 1e15), "other_procs": (0.0, 1e6),
}


def field(rec: Mapping[str, Any], key: str) -> float | None:
    """`rec[key]` when it is a number within the field's BOUNDS, else None."""
    low, high = BOUNDS[key]
    return finite(rec.get(key), low, high)


class TelemetryAccumulator:
    """A run's telemetry summary built one record at a time (`add`), in constant memory: `report` streams
    the file through it, the metrics endpoint feeds it only what was appended since its last scrape."""

    def __init__(self, by_node: bool = True) -> None:
        self.by_node = by_node  # False: one node's own accumulator (its records all name it)
        self.n = 0  # every record, the nodes' too
        self.own = 0  # records without a node (telemetry.jsonl)
        self.nodes: dict[str, TelemetryAccumulator] = {}  # records sampled on compute nodes, by node
        self.t_n = 0
        self.t_min: float | None = None
        self.t_max: float | None = None
        self.utils, self.powers, self.cpus = _Stat(), _Stat(), _Stat()
        self.mem_max: int | None = None
        self.rss_max: int | None = None
        self.run_mem_max: int | None = None
        self.gpu_ids: set[Any] = set()
        self.indices: set[int] = set()
        self.shared = 0
        self.throttled: dict[str, int] = {}
        self.gpu_ticks = 0
        self.reason: str | None = None

    def add(self, rec: Mapping[str, Any]) -> None:
        self.n += 1
        node = rec.get("node")
        if self.by_node and isinstance(node, str) and node:
            if node not in self.nodes:
                self.nodes[node] = TelemetryAccumulator(by_node=False)
            self.nodes[node].add(rec)
            return
        self.own += 1
        t = finite(rec.get("time"))
        if t is not None:
            self.t_n += 1
            self.t_min = t if self.t_min is None else min(self.t_min, t)
            self.t_max = t if self.t_max is None else max(self.t_max, t)
        if (cpu := field(rec, "cpu_percent")) is not None:
            self.cpus.add(cpu)
        if isinstance(rec.get("rss"), int) and (rss := field(rec, "rss")) is not None:
            self.rss_max = max(self.rss_max or 0, int(rss))
        if isinstance(rec.get("gpu_unavailable"), str):
            self.reason = rec["gpu_unavailable"]
        tick_power: list[float] = []
        tick_mem: list[int] = []
        tick_reasons: set[str] = set()
        gpus = [g for g in rec.get("gpus") or () if isinstance(g, dict)]
        self.gpu_ticks += bool(gpus)
        for g in gpus:
            self.gpu_ids.add(g.get("uuid") or g.get("index"))
            if isinstance(g.get("index"), int):
                self.indices.add(g["index"])
            if isinstance(g.get("run_mem"), int) and (run_mem := field(g, "run_mem")) is not None:
                tick_mem.append(int(run_mem))
            if isinstance(g.get("other_procs"), int) and (others := field(g, "other_procs")) is not None:
                self.shared = max(self.shared, int(others))
            if isinstance(g.get("throttle"), list):
                tick_reasons.update(str(r) for r in g["throttle"])
            if (util := field(g, "util_sm")) is not None:
                self.utils.add(util)
            if isinstance(g.get("mem_used"), int) and (mem := field(g, "mem_used")) is not None:
                self.mem_max = max(self.mem_max or 0, int(mem))
            if (power := field(g, "power_w")) is not None:
                tick_power.append(power)
        if tick_power:
            self.powers.add(math.fsum(tick_power))
        if tick_mem:
            self.run_mem_max = max(self.run_mem_max or 0, sum(tick_mem))
        for r in tick_reasons:
            self.throttled[r] = self.throttled.get(r, 0) + 1

    def summary(self) -> TelemetrySummary:
        """The run's summary; with records from compute nodes, their total and each node's (`nodes`)."""
        if not self.nodes:
            return self._own()
        parts = {node: acc.summary() for node, acc in sorted(self.nodes.items())}
        if self.own:
            parts[""] = self._own()  # sampled where perfwatch runs, beside the nodes' files
        return _total(parts)

    def _own(self) -> TelemetrySummary:
        return TelemetrySummary(
            samples=self.own,
            duration_s=(self.t_max - self.t_min) if self.t_n > 1 and self.t_max is not None
            and self.t_min is not None else None,
            gpus=len(self.gpu_ids),
            gpu_util_mean=self.utils.mean,
            gpu_util_max=self.utils.max,
            gpu_mem_max=self.mem_max,
            power_mean_w=self.powers.mean,
            power_max_w=self.powers.max,
            cpu_mean=self.cpus.mean,
            cpu_max=self.cpus.max,
            rss_max=self.rss_max,
            gpu_unavailable=self.reason if not self.gpu_ids else None,
            run_mem_max=self.run_mem_max,
            shared_max=self.shared,
            throttle={r: k / self.gpu_ticks for r, k in sorted(self.throttled.items())} if self.gpu_ticks else None,
            gpu_indices=tuple(sorted(self.indices)),
        )


def _add(values: Iterable[float | int | None]) -> Any:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _total(nodes: Mapping[str, TelemetrySummary]) -> TelemetrySummary:
    """The run over all its nodes: counts, power, CPU and memory added; GPU utilisation weighted by GPUs."""
    parts = list(nodes.values())
    weighted = [(s.gpu_util_mean, s.gpus) for s in parts if s.gpu_util_mean is not None and s.gpus]
    gpus = sum(s.gpus for s in parts)
    durations = [s.duration_s for s in parts if s.duration_s is not None]
    throttle: dict[str, float] = {}
    for s in parts:
        for reason, share in (s.throttle or {}).items():
            throttle[reason] = max(throttle.get(reason, 0.0), share)
    maxima = [s.gpu_util_max for s in parts if s.gpu_util_max is not None]
    mems = [s.gpu_mem_max for s in parts if s.gpu_mem_max is not None]
    reasons = [s.gpu_unavailable for s in parts if s.gpu_unavailable]
    return TelemetrySummary(
        samples=sum(s.samples for s in parts),
        duration_s=max(durations) if durations else None,
        gpus=gpus,
        gpu_util_mean=math.fsum(u * g for u, g in weighted) / sum(g for _, g in weighted) if weighted else None,
        gpu_util_max=max(maxima) if maxima else None,
        gpu_mem_max=max(mems) if mems else None,
        power_mean_w=_add(s.power_mean_w for s in parts),
        power_max_w=_add(s.power_max_w for s in parts),  # the sum of each node's highest: an upper bound
        cpu_mean=_add(s.cpu_mean for s in parts),
        cpu_max=_add(s.cpu_max for s in parts),
        rss_max=_add(s.rss_max for s in parts),
        gpu_unavailable=reasons[0] if reasons and not gpus else None,
        run_mem_max=_add(s.run_mem_max for s in parts),
        shared_max=max(s.shared_max for s in parts),
        throttle=dict(sorted(throttle.items())) if throttle else None,
        gpu_indices=tuple(sorted({i for s in parts for i in s.gpu_indices})),
        nodes=dict(nodes),
    )


def summarize_telemetry(records: Iterable[Mapping[str, Any]]) -> TelemetrySummary:
    acc = TelemetryAccumulator()
    for rec in records:
        acc.add(rec)
    return acc.summary()
