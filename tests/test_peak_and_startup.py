"""The CPU peak is measured on purpose only; report/check/compare never import torch; lazy command imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfwatch.core.measure import host_peak
from perfwatch.core.measure.host_peak import cached_cpu_peak, cpu_model

ROOT = Path(__file__).resolve().parent.parent
ONE = "tests/data/mlperf-logs/v2.1/MosaicML/results/8xA100_80GB-methods/bert/result_0.txt"


def _modules_after(argv: list[str]) -> set[str]:
    """The modules a real `perfwatch ...` process has imported when it is done (its own interpreter)."""
    code = ("import sys, io, contextlib\nfrom perfwatch.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(sys.argv[1:])\n"
            "print(' '.join(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(proc.stdout.split())


@pytest.mark.parametrize("argv", [["report", ONE], ["check", ONE], ["compare", ONE, ONE], ["--help"]])
def test_commands_never_import_torch(argv: list[str]) -> None:
    mods = _modules_after(argv)
    assert "torch" not in mods
    assert "scipy" not in mods  # mlperf_logging's RCP checker is imported only for a closed-division folder


def test_help_imports_no_engine_and_no_mlperf_logging() -> None:
    mods = _modules_after(["--help"])
    for heavy in ("perfwatch.core.engine", "perfwatch.core.model.run", "mlperf_logging", "yaml", "textual"):
        assert heavy not in mods, heavy


def test_measure_refuses_when_busy_and_flags_when_forced(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    with pytest.raises(host_peak.MachineBusy, match="busy"):
        host_peak.measure("fp32", threads=1, cache=tmp_path, busy=lambda: 85.0, matmul=lambda *a, **k: 1e11)
    assert not (tmp_path / host_peak.CACHE_NAME).exists()
    forced = host_peak.measure("fp32", threads=1, tries=3, force=True, cache=tmp_path, busy=lambda: 85.0,
                               matmul=lambda *a, **k: 1e11)
    assert forced.busy_percent == 85.0 and "best of 3" in forced.how and "1 threads" in forced.how
    assert "85% busy" in forced.peak().source
    quiet = host_peak.measure("fp32", threads=2, cache=tmp_path, busy=lambda: 3.0, matmul=lambda *a, **k: 2e11)
    assert "busy" not in quiet.peak().source and quiet.measured_at is not None
    # readers find it without torch: the most threads when the log names none, else that count
    assert cached_cpu_peak("fp32", cache=tmp_path).flops == 2e11  # type: ignore[union-attr]
    assert cached_cpu_peak("fp32", threads=1, cache=tmp_path).flops == 1e11  # type: ignore[union-attr]
    assert cached_cpu_peak("bf16", cache=tmp_path) is None
    stored = json.loads((tmp_path / host_peak.CACHE_NAME).read_text())
    assert all(k.startswith(cpu_model() + "|threads=") for k in stored)


def test_peak_command_shows_what_is_stored(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    run = [sys.executable, "-m", "perfwatch", "peak"]
    out = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "no CPU peak stored" in out.stdout
    host_peak.measure("fp32", threads=1, cache=tmp_path / "perfwatch", busy=lambda: 1.0,
                      matmul=lambda *a, **k: 5e10)
    out = subprocess.run([*run, "--format", "json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    (entry,) = json.loads(out.stdout)
    assert entry["flops"] == 5e10 and entry["threads"] == 1 and entry["how"].startswith("torch ")


def test_package_options_match_the_packager() -> None:
    from perfwatch.commands import package as cmd
    from perfwatch.core.results import submission

    assert cmd.DIVISIONS == submission.DIVISIONS and cmd.STATUSES == submission.STATUSES


def test_launch_measures_missing_peaks_in_a_bounded_child_and_says_why_when_it_cannot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`launch` fills the peak its CPU runs need; when it cannot, the runs' MFU says why, not "never measured"."""
    pytest.importorskip("torch")
    from perfwatch.core.ingest.mllog import Event
    from perfwatch.core.measure import mfu
    from perfwatch.core.model.run import Run

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "perfwatch"
    run = Run("cpu.r0")
    run.apply([Event(0.0, "perfwatch_device", "cpu"), Event(0.0, "perfwatch_threads", 1)])
    said: list[str] = []
    # a child that cannot finish in time: the failure is stored and said, and the run's MFU says it
    problems = host_peak.ensure([("fp32", 1)], say=said.append, cache=cache, timeout=0.01)
    assert problems and "took longer than" in problems[0]
    assert said[0].startswith("measuring this host's CPU peak for 1 thread (fp32)")
    assert host_peak.failure("fp32", 1, cache) == problems[0]
    mfu.forget_cached_cpu_peaks()
    choice = mfu.resolve_peak(run.view())
    assert choice.peak is None and choice.reason == problems[0]
    # a real child (torch, a 2048x2048 matmul, best of 3): stored, the failure forgotten, measured once
    said.clear()
    ticks: list[float] = []  # the seconds spent so far, told every half second while the child measures
    assert host_peak.ensure([("fp32", 1), ("fp32", 1)], say=said.append, cache=cache, progress=ticks.append) == []
    assert ticks and ticks == sorted(ticks) and ticks[0] >= 0.5, ticks
    found = host_peak.lookup("fp32", 1, cache)
    assert found is not None and found.flops > 0 and found.threads == 1 and "best of 3" in found.how
    assert host_peak.failure("fp32", 1, cache) is None
    assert len([line for line in said if line.startswith("measuring")]) == 1
    mfu.forget_cached_cpu_peaks()
    choice = mfu.resolve_peak(run.view())
    assert choice.peak is not None and choice.peak.flops == found.flops
    mfu.forget_cached_cpu_peaks()
