"""Only regular files are read, and whole logs never sit in memory: a FIFO named like a log, a symlink
to /dev/zero and a large log, against the real commands in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launch_helpers import ROOT

REAL = ROOT / "tests/data/mlperf-logs/v2.1/MosaicML/results/8xA100_80GB-baseline/bert/result_0.txt"


def perfwatch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfwatch", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_fifo_and_dev_zero_named_like_logs_are_skipped(tmp_path: Path) -> None:
    tree = tmp_path / "tree" / "bert"
    tree.mkdir(parents=True)
    (tree / "result_0.txt").write_bytes(REAL.read_bytes())
    os.mkfifo(tree / "result_1.txt")  # no writer: open() would block forever, read() too
    (tree / "result_2.txt").symlink_to("/dev/zero")  # endless zeros
    (tree / "mllog").symlink_to("/dev/urandom")
    root = str(tmp_path / "tree")
    for args in (("report", root, "--no-cpu-peak"), ("check", root), ("compare", root, root),
                 ("attach", root, "--once"), ("attach", root, "--headless")):
        out = perfwatch(*args, timeout=60)  # a hang is a TimeoutExpired: the test fails, never stalls
        assert "Traceback" not in out.stderr, (args, out.stderr)
        assert ("1/1 converged" if args[0] == "compare" else "result_0") in out.stdout, (args, out.stdout)
        assert "result_1" not in out.stdout and "result_2" not in out.stdout, (args, out.stdout)


def _peak_rss_mb(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    """Peak RSS of one perfwatch process (getrusage of the children of a small wrapper process)."""
    code = ("import resource, subprocess, sys, json; "
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(json.dumps([resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode, p.stdout]))")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "perfwatch", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    rss_kb, rc, stdout = json.loads(out.stdout)
    return rss_kb / 1024, subprocess.CompletedProcess(args, rc, stdout, "")


def test_attach_once_streams_a_large_log_like_report(tmp_path: Path) -> None:
    lines = REAL.read_bytes().splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if b'"run_start"' in ln)
    t0 = json.loads(lines[start].split(b"MLLOG ", 1)[1])["time_ms"]
    folder = tmp_path / "big" / "bert"
    folder.mkdir(parents=True)
    with open(folder / "result_0.txt", "wb") as fh:
        fh.writelines(lines[: start + 1])
        filler = b"".join(
            b':::MLLOG {"namespace": "", "time_ms": %d, "event_type": "POINT_IN_TIME", "key": "tracked_stats", '
            b'"value": {"throughput": 512.0}, "metadata": {"step": %d, "file": "train.py", "lineno": 1}}\n'
            % (t0 + 1, i) for i in range(4000))
        for _ in range(100):  # about 60 MB
            fh.write(filler)
        fh.writelines(lines[start + 1:])
    assert (folder / "result_0.txt").stat().st_size > 50e6
    report_mb, rep = _peak_rss_mb("report", str(tmp_path / "big"), "--no-cpu-peak")
    once_mb, once = _peak_rss_mb("attach", str(tmp_path / "big"), "--once")
    assert rep.returncode == 0 and "result_0" in once.stdout, once.stdout
    # reading the 60 MB log whole (bytes + split lines) would add well over 100 MB
    assert once_mb < report_mb + 40, (once_mb, report_mb)
