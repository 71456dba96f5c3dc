"""Device and host telemetry: samplers, the 1 Hz sampling thread, per-run telemetry.jsonl.

- `Sampler` protocol (`sample(roots) -> Snapshot`, `close()`), implemented by
  `NvmlSampler` (GPUs, nvml.py), `HostSampler` (psutil,
  host.py), `FakeSampler` (tests only, fake.py) and
  `MultiSampler`, which merges several into one snapshot per tick.
- `TelemetryThread` samples in the background, keeps a bounded history, hands
  every snapshot to a sink (called on the sampling thread: post to your own
  thread from there) and appends each live run's share to its telemetry.jsonl.

Typical use (the launcher plugs `runs`, the app plugs `sink`):

    thread = TelemetryThread(default_sampler(), interval=1.0, sink=app_post, runs=scheduler.resources)
    thread.start(); ...; thread.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfwatch.core.layout import TELEMETRY_FILE
from perfwatch.core.telemetry.jsonl import (
    TelemetrySummary,
    append_record,
    read_telemetry,
    run_record,
    select_gpus,
    summarize_telemetry,
)
from perfwatch.core.telemetry.types import (
    GPU_FIELDS,
    GpuProcess,
    GpuSample,
    GpuStatus,
    HostSample,
    ProcTree,
    RunResources,
    Sampler,
    Snapshot,
)

__all__ = [
    "GPU_FIELDS", "GpuProcess", "GpuSample", "GpuStatus", "HostSample", "MultiSampler",
    "ProcTree", "RunResources", "Sampler", "Snapshot", "TelemetryThread", "TelemetrySummary",
    "append_record", "default_sampler", "read_telemetry", "resources_from_procs", "run_record", "select_gpus",
    "summarize_telemetry",
]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 1.0
DEFAULT_HISTORY = 600  # ten minutes at 1 Hz: what the live plots show; the files keep the rest

RunsFn = Callable[[], Mapping[str, RunResources]]
SinkFn = Callable[[Snapshot], None]


class MultiSampler:
    """Several samplers as one: their snapshots of a tick are merged."""

    def __init__(self, *samplers: Sampler) -> None:
        self.samplers = samplers

    def sample(self, roots: Mapping[str, Sequence[int]] | None = None) -> Snapshot:
        snap = Snapshot(time=time.time())
        for sampler in self.samplers:
            snap = snap.merge(sampler.sample(roots))
        return snap

    def close(self) -> None:
        for sampler in self.samplers:
            sampler.close()


def default_sampler() -> MultiSampler:
    """Host (psutil) + GPUs (NVML, lazily initialised; says why when there are none)."""
    from perfwatch.core.telemetry.host import HostSampler
    from perfwatch.core.telemetry.nvml import NvmlSampler

    return MultiSampler(HostSampler(), NvmlSampler())


def resources_from_procs(procs: Mapping[str, Any]) -> dict[str, RunResources]:
    """Adapter for the scheduler's `procs()` (ProcInfo-like: pid, devices, folder, state).

    A run with devices gets exactly those GPUs; a run without (CPU run, CUDA_VISIBLE_DEVICES="")
    gets none. Only live runs with a pid are returned, so finished runs stop being sampled: the state
    is a `RunState` (core/control/states.py, a layer above this one), asked through its `alive`.
    """
    out: dict[str, RunResources] = {}
    for run_id, p in procs.items():
        pid = getattr(p, "pid", None)
        if not isinstance(pid, int) or not getattr(getattr(p, "state", None), "alive", False):
            continue
        devices = tuple(int(d) for d in (getattr(p, "devices", None) or ()))
        out[run_id] = RunResources((pid,), devices, Path(p.folder))
    return out


class TelemetryThread:
    """Samples every `interval` seconds on a daemon thread until `stop()`."""

    def __init__(
        self,
        sampler: Sampler,
        *,
        interval: float = DEFAULT_INTERVAL,
        sink: SinkFn | None = None,
        runs: RunsFn | None = None,
        history: int = DEFAULT_HISTORY,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0 seconds")
        self.sampler = sampler
        self.interval = float(interval)
        self.sink = sink
        self.sinks: list[SinkFn] = []  # more readers of every sample (`subscribe`)
        self.runs = runs
        self._history: deque[Snapshot] = deque(maxlen=max(history, 1))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0
        self.last_error: str | None = None
        self.ticks = 0

    # ---- one tick ----------------------------------------------------------------
    def tick(self) -> Snapshot:
        """Sample once, record, write the runs' shares, call the sink. Runs on the caller's thread."""
        resources: Mapping[str, RunResources] = {}
        if self.runs is not None:
            try:
                resources = dict(self.runs())
            except Exception as exc:
                self._error(f"runs() failed: {exc!r}")
        roots = {rid: res.pids for rid, res in resources.items()}
        snap = self.sampler.sample(roots)
        with self._lock:
            self._history.append(snap)
            self.ticks += 1
        for run_id, res in resources.items():
            self._write(snap, run_id, res)
        for sink in ([self.sink] if self.sink is not None else []) + self.sinks:
            try:
                sink(snap)
            except Exception as exc:
                self._error(f"sink failed: {exc!r}")
        return snap

    def subscribe(self, sink: SinkFn) -> None:
        """Also hand every sample to `sink` (on this thread): one sampler serves the recorder and a live view."""
        self.sinks.append(sink)

    def _write(self, snap: Snapshot, run_id: str, res: RunResources) -> None:
        try:
            record = run_record(snap, run_id, res)
            if record is not None:
                Path(res.folder).mkdir(parents=True, exist_ok=True)
                append_record(Path(res.folder), record)
        except (OSError, ValueError) as exc:
            self._error(f"{run_id}: cannot write {TELEMETRY_FILE}: {exc}")

    def _error(self, message: str) -> None:
        self.errors += 1
        self.last_error = message
        log.warning("telemetry: %s", message)

    # ---- thread ------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("telemetry thread already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="perfwatch-telemetry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # a sampler bug must not kill telemetry for the session
                self._error(f"sample failed: {exc!r}")
            deadline += self.interval
            delay = deadline - time.monotonic()
            if delay < 0:  # fell behind (suspended, overloaded): skip the missed ticks
                deadline = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (waits for the current tick) and close the sampler."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            self._thread = None
        self.sampler.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- reading -----------------------------------------------------------------
    @property
    def history(self) -> tuple[Snapshot, ...]:
        with self._lock:
            return tuple(self._history)

    @property
    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._history[-1] if self._history else None
