"""Tree walking never follows a symlinked folder, in every mode: a run folder holding `data -> /` and a
loop `again -> ..` is listed at once, with bounded memory (RSS read by psutil from outside), by the
polling watcher, both inotify watchers and `report`'s walk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

RSS_CAP = 400 * 2**20  # generous: the watcher itself needs ~60 MB; a walk of / grows ~150 MB/s
LINE = b':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "submission_benchmark", ' \
       b'"value": "resnet", "metadata": {"file": "x.py", "lineno": 1}}\n'

WATCH = textwrap.dedent("""
    import sys, time
    from perfwatch.core.ingest.watch import LogWatcher
    seen = []
    mode, root = sys.argv[1], sys.argv[2]
    w = LogWatcher([root], lambda b: seen.extend(x.path for x in b), poll=mode == "poll", poll_interval=0.05,
                   rescan_interval=0.2, min_interval=0.05 if mode == "coalesced" else 0.0)
    w.start()
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    print("SEEN", sorted(set(seen)), flush=True)
    time.sleep(4)  # many polls and re-scans
    w.stop()
    print("DONE", flush=True)
""")


def hostile_tree(tmp_path: Path) -> Path:
    run = tmp_path / "logs" / "resnet"
    run.mkdir(parents=True)
    (run / "result_0.txt").write_bytes(LINE)
    (run / "data").symlink_to("/")
    (run / "again").symlink_to("..")
    (run / "usr").symlink_to("/usr", target_is_directory=True)
    return tmp_path / "logs"


def peak_rss(proc: subprocess.Popen[str], timeout: float = 90) -> int:
    """The child's largest RSS until it exits (polled); kills it past the cap or the timeout."""
    ps, peak = psutil.Process(proc.pid), 0
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.Error:
            break
        if peak > RSS_CAP or time.monotonic() > deadline:
            proc.kill()
            break
        time.sleep(0.05)
    proc.wait()
    return peak


@pytest.mark.parametrize("mode", ["poll", "inotify", "coalesced"])
def test_watcher_never_follows_a_link_to_root(tmp_path: Path, mode: str) -> None:
    root = hostile_tree(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", WATCH, mode, str(root)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    peak = peak_rss(proc)
    out = proc.stdout.read() if proc.stdout else ""
    assert peak < RSS_CAP, f"{mode}: RSS reached {peak / 2**20:.0f} MB: {out[-2000:]}"
    assert "DONE" in out, out[-2000:]
    assert f"SEEN ['{root / 'resnet' / 'result_0.txt'}']" in out  # only the run's log: nothing found through a link


def test_report_walk_never_follows_a_link_to_root(tmp_path: Path) -> None:
    root = hostile_tree(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "perfwatch", "report", str(root), "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = peak_rss(proc)
    assert peak < RSS_CAP and proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    data = json.loads(proc.stdout.read() if proc.stdout else "")
    assert [r["path"] for r in data["runs"]] == ["resnet/result_0.txt"]
