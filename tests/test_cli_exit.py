"""One-shot commands as real programs: the output arrives whole and the exit status is the command's.

These tests run `report` and `check` as new processes, the way a user does, and check what a user relies
on: the whole output arrives through a pipe or a file, the exit status is the command's, `| head` closes
the pipe without a traceback, and the official scores in the output equal MLPerf's published ones."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PERFWATCH = [sys.executable, "-m", "perfwatch"]
# a user's shell: block-buffered stdout into a file or a pipe (CI may set PYTHONUNBUFFERED)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def test_report_json_through_a_file_is_complete_and_matches_the_official_scores(
        tmp_path: Path, mlperf_logs: Path, official_scores: dict) -> None:
    out = tmp_path / "report.json"
    with open(out, "w") as fh:
        rc = subprocess.run([*PERFWATCH, "report", str(mlperf_logs), "--format", "json"], stdout=fh,
                            stderr=subprocess.PIPE, text=True, timeout=120, env=ENV).returncode
    assert rc == 0
    body = json.loads(out.read_text())  # the whole document: a lost buffer would not parse
    assert len(body["runs"]) == 35
    benches = {b["folder"]: b for b in body["benchmarks"]}
    assert set(benches) == set(official_scores)
    for folder, off in official_scores.items():
        assert benches[folder]["score_minutes"] == pytest.approx(off["official"]["score"], abs=1e-9)


def test_exit_status_is_the_commands(tmp_path: Path) -> None:
    missing = subprocess.run([*PERFWATCH, "report", str(tmp_path / "absent")], capture_output=True, text=True,
                             timeout=60, env=ENV)
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = subprocess.run([*PERFWATCH, "report", str(empty)], capture_output=True, text=True, timeout=60, env=ENV)
    assert nothing.returncode == 1 and "no MLLOG records" in nothing.stderr


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path, mlperf_logs: Path) -> None:
    tree = tmp_path / "three"
    for copy in ("a", "b", "c"):  # ~220 KB of JSON: more than a pipe holds, so the writer meets the closed end
        shutil.copytree(mlperf_logs / "v2.1", tree / copy / "v2.1")
    pw = subprocess.Popen([*PERFWATCH, "report", str(tree), "--format", "json"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=ENV)
    assert pw.stdout is not None and pw.stderr is not None
    first = pw.stdout.readline()
    pw.stdout.close()  # what `| head -1` does
    err = pw.stderr.read().decode()
    assert pw.wait(timeout=120) == 0
    assert first.strip() == b"{" and "Traceback" not in err and "Exception ignored" not in err, err


def test_check_prints_its_verdict_in_full(mlperf_logs: Path) -> None:
    one = next(mlperf_logs.rglob("result_0.txt"))
    out = subprocess.run([*PERFWATCH, "check", str(one)], capture_output=True, text=True, timeout=120, env=ENV)
    assert out.returncode in (0, 1), out.stderr
    assert "runs pass the official compliance checker" in out.stdout
    assert out.stdout.rstrip().splitlines()[-1].startswith("RCP")  # the last line arrived too

