"""CPU cost of the telemetry thread at 1 Hz (HostSampler + NvmlSampler, one live run, jsonl writes).

Measures the sampling thread's own CPU time (from /proc via psutil's per-thread
times) and the whole process's CPU time while the main thread only sleeps, over
`--seconds` of wall time. Target: well under 1 % of one core.

    python benchmarks/sampler_overhead.py --seconds 20
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from perfwatch.core.telemetry.sampling import RunResources, TelemetryThread, default_sampler, read_telemetry


def thread_cpu(native_id: int) -> float:
    for t in psutil.Process().threads():
        if t.id == native_id:
            return t.user_time + t.system_time
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--children", type=int, default=4, help="processes in the watched run's tree")
    args = ap.parse_args()

    code = "import subprocess,sys,time\n" + "".join(
        "subprocess.Popen([sys.executable,'-c','import time; time.sleep(600)'])\n" for _ in range(args.children - 1)
    ) + "time.sleep(600)\n"
    run = subprocess.Popen([sys.executable, "-c", code])
    folder = Path(tempfile.mkdtemp(prefix="perfwatch-overhead-"))
    runs = {"run0": RunResources((run.pid,), (0,), folder / "run0")}
    tt = TelemetryThread(default_sampler(), interval=args.interval, runs=lambda: runs)
    try:
        time.sleep(1.0)  # let the run's children start
        me = psutil.Process()
        tt.start()
        time.sleep(0.2)  # the first tick (NVML init, priming) is part of the measurement below anyway
        thread = next(t for t in threading.enumerate() if t.name == "perfwatch-telemetry")
        native = thread.native_id or 0
        t_cpu0 = thread_cpu(native)
        p0 = me.cpu_times()
        w0 = time.monotonic()
        ticks0 = tt.ticks
        time.sleep(args.seconds)
        wall = time.monotonic() - w0
        t_cpu = thread_cpu(native) - t_cpu0
        p1 = me.cpu_times()
        ticks = tt.ticks - ticks0
    finally:
        tt.stop()
        for child in psutil.Process(run.pid).children(recursive=True):
            child.kill()
        run.kill()
        run.wait(10)
    proc_cpu = (p1.user - p0.user) + (p1.system - p0.system)
    snap = tt.latest
    gpu = snap.gpu if snap is not None else None
    records = read_telemetry(folder / "run0")
    print(f"host: {psutil.cpu_count()} cpus, pid {os.getpid()}, interval {args.interval}s, wall {wall:.1f}s")
    print(f"GPU sampler: {'available' if gpu and gpu.available else 'N/A: ' + str(gpu.reason if gpu else None)}")
    print(f"ticks: {ticks}, run tree: {len(records[-1].get('pids', [])) if records else 0} processes,"
          f" {len(records)} telemetry.jsonl lines")
    print(f"sampling thread CPU: {t_cpu * 1000:.1f} ms = {100 * t_cpu / wall:.3f} % of one core"
          f" ({1000 * t_cpu / max(ticks, 1):.2f} ms per tick)")
    print(f"whole process CPU:   {proc_cpu * 1000:.1f} ms = {100 * proc_cpu / wall:.3f} % of one core")
    ok = 100 * t_cpu / wall < 1.0
    print("PASS: well under 1 %" if ok else "FAIL: >= 1 %")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
