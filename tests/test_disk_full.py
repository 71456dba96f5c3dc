"""Disk full under LOGDIR (a real size-limited tmpfs): perfwatch says so, keeps going, retries, never
runs anything twice, leaves no temp files, and shows `unknown` for a run whose exit.json was lost."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import ROOT, campaign_file, kill_groups, wait_for

from perfwatch.core.control import process


@pytest.fixture
def small_fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 4 MiB tmpfs (needs root to mount; skipped with the reason otherwise)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(folder: Path) -> Path:
    """Write until the file system says ENOSPC; returns the filler file."""
    filler = folder / "filler"
    with open(filler, "wb") as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    return filler


def registry(logdir: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in json.loads((logdir / "perfwatch.json").read_text())["runs"]}


def test_disk_full_keeps_going_never_reruns_and_shows_unknown(tmp_path: Path, small_fs: Path) -> None:
    counter = tmp_path / "started.txt"  # outside the full file system: one line per process start
    code = f"import os, time; open({str(counter)!r}, 'a').write(os.environ['PERFWATCH_RUN_ID'] + '\\\\n'); time.sleep(1.5)"
    path = campaign_file(tmp_path, f"""
        scheduler: {{max_parallel: 1}}
        jobs:
          - {{name: s, repeat: 3, cmd: [python, -c, "{code}"]}}
        """)
    logdir = small_fs / "logdir"
    out = tmp_path / "launch.out"
    with open(out, "wb") as fh:
        pw = subprocess.Popen([sys.executable, "-m", "perfwatch", "launch", str(path), "--headless",
                               "--logdir", str(logdir)], cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                              start_new_session=True)
    pgids: set[int] = set()
    try:
        assert wait_for(lambda: (logdir / "perfwatch.json").exists() and registry(logdir)["s.r0"]["pid"])
        pgids.add(registry(logdir)["s.r0"]["pgid"])
        filler = fill(small_fs)
        assert wait_for(lambda: "LOGDIR's file system is full" in out.read_text(), timeout=30), out.read_text()
        assert wait_for(lambda: process.find_supervisor(logdir / "s.r0") is None)  # s.r0 ended meanwhile
        assert pw.poll() is None, out.read_text()  # perfwatch is still there, no traceback
        assert "Traceback" not in out.read_text()
        assert not (logdir / "s.r0" / "exit.json").exists()  # the supervisor could not write it
        assert counter.read_text().split() == ["s.r0"]  # nothing started while "starting" cannot be recorded
        os.killpg(pw.pid, signal.SIGKILL)  # perfwatch dies while the disk is full
        pw.wait()
        leftovers = [p for p in logdir.rglob("*") if p.name.endswith(".tmp")]
        assert leftovers == [], leftovers  # no zero-byte temp files of failed atomic writes
        filler.unlink()
        done = subprocess.run([sys.executable, "-m", "perfwatch", "attach", str(logdir), "--headless"], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        rows = {ln.split()[0]: ln.split()[1] for ln in done.stdout.splitlines() if ln.startswith("s.r")}
        assert rows == {"s.r0": "unknown", "s.r1": "done", "s.r2": "done"}, done.stdout
        assert "exit status unknown" in done.stdout and "SIGKILL" not in done.stdout, done.stdout
        assert sorted(counter.read_text().split()) == ["s.r0", "s.r1", "s.r2"]  # each ran exactly once
        assert done.returncode == 1
    finally:
        kill_groups(pgids | {pw.pid})


def test_launch_onto_a_full_file_system_says_so_and_starts_nothing(tmp_path: Path, small_fs: Path) -> None:
    path = campaign_file(tmp_path, """
        jobs:
          - {name: s, cmd: [python, -c, "print(1)"]}
        """)
    (small_fs / "logdir").mkdir()
    filler = fill(small_fs)
    try:
        out = subprocess.run([sys.executable, "-m", "perfwatch", "launch", str(path), "--headless", "--logdir",
                              str(small_fs / "logdir")], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "LOGDIR's file system is full" in out.stderr, out.stdout + out.stderr
        assert "Traceback" not in out.stderr
        assert not (small_fs / "logdir" / "s.r0").exists()
        assert [p.name for p in (small_fs / "logdir").iterdir() if p.name.endswith(".tmp")] == []
    finally:
        filler.unlink()
