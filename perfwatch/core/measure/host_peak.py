"""This host's CPU matmul peak: measured only on purpose (`perfwatch peak --measure`), read without torch.

The MFU of a CPU run needs the host's peak FLOP/s, which no datasheet gives: it is measured as the
best of several torch matmuls. Measuring steals every core for seconds and needs torch (a quarter
of a second and 190 MB just to import), so `report`, `check`, `compare` and the live view only
read what was stored, here, without importing torch. A measurement taken while the machine is busy
(a campaign loading the cores) would understate the peak and overstate every MFU after it: the
command refuses when the CPUs are busier than `BUSY_PERCENT` (or, with --force, stores the number
flagged with how busy they were). Every entry says when and how it was measured.

Stored in `<cache>/perfwatch/cpu_peak.json` (measure/peaks.py's table; the same key
`<cpu model>|threads=N|torch=V|<dtype>`), with `measured_at`, `how`, `tries`, `busy_percent`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfwatch.core.layout import CPU_PEAK_CACHE, write_json_atomic
from perfwatch.core.measure import peaks
from perfwatch.core.measure.peaks import PeakFlops, cpu_model

BUSY_PERCENT = 20.0  # CPU use (all cores) above which a measurement is refused
TRIES = 5
CACHE_NAME = CPU_PEAK_CACHE


@dataclass(frozen=True, slots=True)
class StoredPeak:
    key: str
    model: str
    threads: int
    torch: str
    dtype: str
    flops: float
    measured_at: float | None
    how: str
    busy_percent: float | None

    def peak(self) -> PeakFlops:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.measured_at)) if self.measured_at else "unknown"
        flag = f", CPUs {self.busy_percent:.0f}% busy then" if self.busy_percent and \
            self.busy_percent > BUSY_PERCENT else ""
        return PeakFlops(f"cpu: {self.model} x {self.threads} threads", self.dtype, self.flops,
                         f"measured {when}: {self.how}{flag}", measured=True, measured_at=self.measured_at)

    def to_json(self) -> dict[str, Any]:
        return {"cpu": self.model, "threads": self.threads, "torch": self.torch, "dtype": self.dtype,
                "flops": self.flops, "measured_at": self.measured_at, "how": self.how,
                "busy_percent": self.busy_percent}


def cache_path(cache: Path | None = None) -> Path:
    return (cache or peaks.cache_dir()) / CACHE_NAME


def _table(path: Path) -> dict[str, Any]:
    import json  # lazy: not on `report`'s path (~2 ms of start-up)

    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def stored(cache: Path | None = None) -> list[StoredPeak]:
    """Every stored measurement (any CPU), oldest first."""
    out = []
    for key, entry in _table(cache_path(cache)).items():
        parts = key.split("|")
        if len(parts) != 4 or not isinstance(entry, dict) or not isinstance(entry.get("flops"), int | float):
            continue
        model, threads, torch, dtype = parts
        try:
            n = int(threads.removeprefix("threads="))
        except ValueError:
            continue
        at = entry.get("measured_at")
        busy = entry.get("busy_percent")
        out.append(StoredPeak(key, model, n, torch.removeprefix("torch="), dtype, float(entry["flops"]),
                              float(at) if isinstance(at, int | float) else None,
                              str(entry.get("how") or "torch matmul, best of N"),
                              float(busy) if isinstance(busy, int | float) else None))
    return sorted(out, key=lambda s: s.measured_at or 0.0)


def lookup(dtype: str, threads: int | None = None, cache: Path | None = None) -> StoredPeak | None:
    """This CPU's stored peak for `dtype` (and `threads`; None: the most threads measured); never measures."""
    model = cpu_model()
    mine = [s for s in stored(cache) if s.model == model and s.dtype == dtype
            and (threads is None or s.threads == threads)]
    if not mine:
        return None
    return max(mine, key=lambda s: (s.threads, s.measured_at or 0.0))


def cpu_busy_percent(interval: float = 1.0) -> float:
    import psutil

    return float(psutil.cpu_percent(interval=interval))


class MachineBusy(RuntimeError):
    """The CPUs are in use: a matmul measured now would understate the peak."""


def measure(dtype: str = "fp32", *, threads: int | None = None, tries: int = TRIES, size: int = 2048,
            force: bool = False, cache: Path | None = None, busy: Callable[[], float] = cpu_busy_percent,
            matmul: Callable[..., float] | None = None) -> StoredPeak:
    """Measure (best of `tries`) and store; refuses (MachineBusy) when the CPUs are busy unless `force`."""
    load = busy()
    if load > BUSY_PERCENT and not force:
        raise MachineBusy(f"the CPUs are {load:.0f}% busy (more than {BUSY_PERCENT:.0f}%): a peak measured now "
                          "would be too low; stop what runs, or pass --force to store it flagged as such")
    import torch

    from perfwatch.core.measure.peaks import _TORCH_DTYPES, measure_matmul

    if dtype not in _TORCH_DTYPES:
        raise ValueError(f"no CPU matmul for {dtype}; use one of {sorted(_TORCH_DTYPES)}")
    n_threads = threads or torch.get_num_threads()
    run = matmul or measure_matmul
    flops = float(run(dtype, size=size, repeats=tries, threads=n_threads))
    how = f"torch {torch.__version__} {dtype} {size}x{size} matmul, best of {tries}, {n_threads} threads"
    key = f"{cpu_model()}|threads={n_threads}|torch={torch.__version__}|{dtype}"
    path = cache_path(cache)
    table = _table(path)
    table[key] = {"flops": flops, "measured_at": time.time(), "how": how, "tries": tries,
                  "busy_percent": round(load, 1)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, table)
    found = next(s for s in stored(cache) if s.key == key)
    return found

