"""Where perfwatch keeps its own code beside a well-kept library, the measurement that decided it.

    python benchmarks/library_choices.py            # about a minute; prints one line per choice

Each figure is the median of several fresh runs on this machine (import costs: a new interpreter
each time, wall clock). The one-line comments beside the code quote these lines.

- results/stats.py (Student t by incomplete beta) vs scipy: `perfwatch compare`'s whole run, and the
  import of scipy.special / scipy.stats it would add (scipy is only mlperf-logging's dependency).
- host memory: one /proc/meminfo read vs psutil.virtual_memory() + swap_memory(), per 1 Hz sample
  (0.25 ms a second saved did not pay for a second code path: host.py uses psutil).
- telemetry/host.py's /proc/<pid>/task/*/children walk vs psutil.Process.children(recursive=True),
  per run tree per sample, with this host's process count.
- exporters/svg.py + html.py f-strings vs jinja2: jinja2's import (it is not a dependency of
  `report --format html`; only the web extra pulls it in).
- ui/widgets/plot.py vs textual-plotext: plotext's import, when installed (`pip install textual-plotext`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOSAIC = ROOT / "tests/data/mlperf-logs/v2.1/MosaicML/results"


def wall(argv: list[str], reps: int = 5) -> float:
    """Median wall seconds of `argv` in a fresh process."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, capture_output=True, check=True, timeout=300)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def imports(module: str, reps: int = 5) -> float:
    """Median extra seconds that importing `module` adds to a bare interpreter."""
    base = wall([sys.executable, "-c", "pass"], reps)
    return wall([sys.executable, "-c", f"import {module}"], reps) - base


def per_call(fn, n: int = 2000) -> float:  # type: ignore[no-untyped-def]
    """Median microseconds per call over 5 batches of n."""
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(batches)


def main() -> None:
    print(f"host: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    compare = [sys.executable, "-m", "perfwatch", "compare", str(MOSAIC / "8xA100_80GB-baseline/bert"),
               str(MOSAIC / "8xA100_80GB-methods/bert")]
    print(f"stats: perfwatch compare (bert 10 vs 10 runs) {wall(compare):.2f} s; results.stats import "
          f"+{imports('perfwatch.core.results.stats') * 1e3:.0f} ms; scipy.special "
          f"+{imports('scipy.special') * 1e3:.0f} ms; scipy.stats +{imports('scipy.stats') * 1e3:.0f} ms")

    import psutil

    from perfwatch.core.telemetry import host

    def by_psutil() -> None:
        psutil.virtual_memory()
        psutil.swap_memory()

    def meminfo_once() -> None:
        with open("/proc/meminfo", "rb") as fh:
            fh.read().split()

    print(f"meminfo: /proc/meminfo read once {per_call(meminfo_once):.1f} us; psutil virtual_memory + swap_memory "
          f"{per_call(by_psutil):.1f} us per sample")

    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(3)]
    try:
        me = os.getpid()
        count = len(psutil.pids())
        walk = per_call(lambda: host._descendants([me]), 200)
        scan = per_call(lambda: psutil.Process(me).children(recursive=True), 200)
        print(f"tree: /proc children walk {walk:.0f} us; psutil children(recursive) {scan:.0f} us "
              f"per run tree ({count} processes on the host)")
    finally:
        for k in kids:
            k.kill()
            k.wait()

    print(f"templates: jinja2 import +{imports('jinja2') * 1e3:.0f} ms; exporters.html import "
          f"+{imports('perfwatch.exporters.html') * 1e3:.0f} ms")
    try:
        print(f"plot: plotext import +{imports('plotext') * 1e3:.0f} ms; ui.widgets.plot import "
              f"+{imports('perfwatch.ui.widgets.plot') * 1e3:.0f} ms")
    except subprocess.CalledProcessError:
        print("plot: plotext is not installed (pip install textual-plotext to measure it)")


if __name__ == "__main__":
    main()
