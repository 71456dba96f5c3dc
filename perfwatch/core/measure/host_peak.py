"""This host's CPU matmul peak: measured on purpose, stored, and read without torch.

The MFU of a CPU run needs the host's peak FLOP/s, which no datasheet gives: it is measured as the
best of several torch matmuls. Measuring steals every core for seconds and needs torch (a quarter
of a second and 190 MB just to import), so `report`, `check`, `compare` and the live view only
read what was stored, here, without importing torch. It is measured by `perfwatch peak --measure`,
and by `perfwatch launch` before a campaign's CPU runs start, for each thread count and dtype they
use that this host has no peak for yet (`ensure`, in a child process bounded in time: a few seconds).

A measurement taken while the machine is busy would understate the peak and overstate every MFU
after it: `perfwatch peak --measure` refuses when the CPUs are busier than `BUSY_PERCENT` (or, with
--force, stores the number flagged with how busy they were). `launch` measures before its own runs
start, so any load is someone else's: it stores the number flagged when the CPUs were busy, and
measures again at the next launch, keeping the higher (a busy machine only ever lowers the peak).
Every entry says when and how it was measured; a failed attempt is stored too (`failed`), so the
run's MFU says why it is missing.

Stored in `<cache>/perfwatch/cpu_peak.json`, keyed `<cpu model>|threads=N|torch=V|<dtype>`, with
`measured_at`, `how`, `tries`, `busy_percent`.
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfwatch.core.layout import CPU_PEAK_CACHE, user_cache_dir, write_json_atomic
from perfwatch.core.measure.peaks import PeakFlops

if TYPE_CHECKING:
    from perfwatch.core.control.campaign import Campaign

BUSY_PERCENT = 20.0  # CPU use (all cores) above which a measurement is refused
TRIES = 5
CACHE_NAME = CPU_PEAK_CACHE
MATMUL_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # torch dtype of each
ENSURE_TRIES = 3  # launch's measurement: best of 3 ...
ENSURE_TIMEOUT_S = 60.0  # ... and never longer than this (torch import included)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def cache_dir() -> Path:
    """The user's cache folder (layout.user_cache_dir); a function here so tests can point it elsewhere."""
    return user_cache_dir()


def measure_matmul(dtype: str = "fp32", *, size: int = 2048, repeats: int = 5, threads: int | None = None) -> float:
    """Best-of-`repeats` FLOP/s of an n x n torch matmul on the CPU (2 n^3 FLOPs each)."""
    import torch

    tdtype = getattr(torch, MATMUL_DTYPES[dtype])
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        a = torch.randn(size, size).to(tdtype)
        b = torch.randn(size, size).to(tdtype)
        torch.matmul(a, b)  # warm-up: allocation, thread pool, kernel selection
        best = math.inf
        for _ in range(max(repeats, 1)):
            t0 = time.perf_counter()
            torch.matmul(a, b)
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(old)
    return 2.0 * size**3 / best


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
    return (cache or cache_dir()) / CACHE_NAME


def _table(path: Path) -> dict[str, Any]:

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
            force: bool = False, cache: Path | None = None, busy: Callable[[], float] | None = cpu_busy_percent,
            matmul: Callable[..., float] | None = None, keep_best: bool = False) -> StoredPeak:
    """Measure (best of `tries`) and store; refuses (MachineBusy) when the CPUs are busy unless `force`.
    `keep_best`: a stored higher peak for the same key stays (a busy machine only lowers it)."""
    load = busy() if busy is not None else None  # None: not looked at (a caller that knows)
    if load is not None and load > BUSY_PERCENT and not force:
        raise MachineBusy(f"the CPUs are {load:.0f}% busy (more than {BUSY_PERCENT:.0f}%): a peak measured now "
                          "would be too low; stop what runs, or pass --force to store it flagged as such")
    import torch

    if dtype not in MATMUL_DTYPES:
        raise ValueError(f"no CPU matmul for {dtype}; use one of {sorted(MATMUL_DTYPES)}")
    n_threads = threads or torch.get_num_threads()
    run = matmul or measure_matmul
    flops = float(run(dtype, size=size, repeats=tries, threads=n_threads))
    how = f"torch {torch.__version__} {dtype} {size}x{size} matmul, best of {tries}, {n_threads} threads"
    key = f"{cpu_model()}|threads={n_threads}|torch={torch.__version__}|{dtype}"
    path = cache_path(cache)
    table = _table(path)
    old = table.get(key)
    kept = keep_best and isinstance(old, dict) and isinstance(old.get("flops"), int | float) and old["flops"] >= flops
    if not kept:
        table[key] = {"flops": flops, "measured_at": time.time(), "how": how, "tries": tries,
                      "busy_percent": round(load, 1) if load is not None else None}
    table.pop(_failed_key(dtype, n_threads), None)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, table)
    found = next(s for s in stored(cache) if s.key == key)
    return found



def cpu_peak(dtype: str = "fp32", *, threads: int | None = None, cache: Path | None = None, refresh: bool = False,
             measure_with: Callable[[str, int], float] | None = None) -> PeakFlops:
    """The stored peak for `dtype` and `threads`, measured (in this process, with torch) when missing."""
    import torch

    n = threads or torch.get_num_threads()
    found = None if refresh else lookup(dtype, n, cache)
    if found is None:
        matmul = None
        if measure_with is not None:
            fixed = measure_with

            def matmul(dt: str, **kw: Any) -> float:
                return fixed(dt, int(kw["threads"]))

        found = measure(dtype, threads=n, force=True, cache=cache, busy=None, matmul=matmul)
    return found.peak()


def cached_cpu_peak(dtype: str = "fp32", *, threads: int | None = None, cache: Path | None = None) -> PeakFlops | None:
    """The measured CPU peak if this host measured it before (report, live view); never measures, no torch."""
    found = lookup(dtype, threads, cache)
    return found.peak() if found is not None else None


def _failed_key(dtype: str, threads: int) -> str:
    return f"{cpu_model()}|threads={threads}|failed|{dtype}"


def failure(dtype: str, threads: int | None, cache: Path | None = None) -> str | None:
    """Why the last attempt to measure this peak failed (stored by `ensure`), if it did."""
    if threads is None:
        return None
    entry = _table(cache_path(cache)).get(_failed_key(dtype, threads))
    return str(entry.get("why")) if isinstance(entry, dict) and entry.get("why") else None


def wanted(dtype: str, threads: int, cache: Path | None = None) -> bool:
    """Whether `launch` should measure this peak: none stored, or one flagged as taken on a busy machine."""
    if dtype not in MATMUL_DTYPES:
        return False
    found = lookup(dtype, threads, cache)
    return found is None or (found.busy_percent is not None and found.busy_percent > BUSY_PERCENT)


def campaign_needs(campaign: Campaign) -> set[tuple[str, int]]:
    """The (dtype, threads) CPU peaks a campaign's runs are measured against on this host: its CPU runs
    (no GPU) that run here (not on Slurm nodes) and have no campaign `peak_flops` of their own."""
    from perfwatch.core.measure.peaks import normalize_dtype

    if campaign.backend.backend != "local":
        return set()
    return {(normalize_dtype(r.precision), r.threads) for r in campaign.runs
            if r.devices == 0 and not r.peak_flops}


def ensure(pairs: Iterable[tuple[str, int]], *, say: Callable[[str], None], cache: Path | None = None,
           timeout: float = ENSURE_TIMEOUT_S, progress: Callable[[float], None] | None = None) -> list[str]:
    """Measure the (dtype, threads) peaks this host lacks, each in a child process bounded by `timeout`;
    `say` is told what happens, `progress` the seconds spent so far on a measurement, every half second.
    Returns the problems (also stored, for the runs' MFU to say)."""
    problems: list[str] = []
    for dtype, threads in sorted(set(pairs)):
        if not wanted(dtype, threads, cache):
            continue
        say(f"measuring this host's CPU peak for {threads} thread{'s' if threads != 1 else ''} ({dtype}) "
            "for the MFU of CPU runs ...")
        t0 = time.monotonic()
        argv = [sys.executable, "-m", "perfwatch.core.measure.host_peak", "--dtype", dtype, "--threads", str(threads)]
        if cache is not None:
            argv += ["--cache", str(cache)]
        try:
            why = _measure(argv, t0, timeout, progress)
        except OSError as exc:
            why = str(exc)
        if why is None:
            found = lookup(dtype, threads, cache)
            flops = f"{found.flops / 1e9:,.1f} GFLOP/s" if found is not None else "stored"
            busy = f", CPUs {found.busy_percent:.0f}% busy then (flagged)" if found is not None and \
                found.busy_percent is not None and found.busy_percent > BUSY_PERCENT else ""
            say(f"  {flops} in {time.monotonic() - t0:.1f} s{busy}")
            continue
        why = f"launch could not measure this host's CPU peak: {why}"
        problems.append(why)
        say(f"  {why}")
        path = cache_path(cache)
        table = _table(path)
        table[_failed_key(dtype, threads)] = {"why": why, "at": time.time()}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, table)
        except OSError:
            pass
    return problems


def _measure(argv: list[str], t0: float, timeout: float, progress: Callable[[float], None] | None) -> str | None:
    """Run the measuring child; None when it stored a peak, else why not."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
    while True:
        try:
            _out, err = child.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() - t0 > timeout:
                child.kill()
                child.communicate()
                return f"took longer than {timeout:.0f} s"
            if progress is not None:
                progress(time.monotonic() - t0)
    return None if child.returncode == 0 else (err.strip().splitlines() or ["failed"])[-1]


def main(argv: list[str] | None = None) -> int:
    """The child `ensure` runs: measure one peak now, keep the best stored."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m perfwatch.core.measure.host_peak")
    ap.add_argument("--dtype", choices=sorted(MATMUL_DTYPES), default="fp32")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--cache", type=Path)
    a = ap.parse_args(argv)
    try:
        found = measure(a.dtype, threads=a.threads, tries=ENSURE_TRIES, force=True, cache=a.cache, keep_best=True)
    except ImportError:
        print("measuring needs torch (pip install torch)", file=sys.stderr)
        return 2
    except (OSError, ValueError, RuntimeError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(found.flops)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
