"""Arguments that would do something the user did not mean are refused with exit 2 and a message, before
anything runs: empty or blank paths (they would mean the current folder), `package --out` inside the
LOGDIR, an absurd `peak --threads`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).parent / "data/mlperf-logs/v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet"


def perfwatch(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfwatch", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": os.getcwd()})


@pytest.mark.parametrize("argv", [
    ["control", "", "r0", "stop"], ["control", "  ", "r0", "stop"], ["report", ""], ["report", " "],
    ["report", "LOGS", "--mila-json", ""], ["launch", "CAMP", "--logdir", ""], ["check", ""], ["compare", "", "LOGS"],
    ["attach", ""], ["serve", ""], ["package", "LOGS", "--out", "", "--submitter", "x"],
])
def test_empty_paths_are_refused(tmp_path: Path, argv: list[str]) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(SRC, logs)
    camp = tmp_path / "camp.yaml"
    camp.write_text("jobs:\n  - {name: j, cmd: [true]}\n")
    argv = [str(logs) if a == "LOGS" else str(camp) if a == "CAMP" else a for a in argv]
    out = perfwatch(*argv, cwd=logs)  # run inside a LOGDIR: "" must not mean it
    assert out.returncode == 2, out.stdout + out.stderr
    assert "an empty path" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "logdir").exists() and sorted(p.name for p in logs.iterdir()) == \
        sorted(p.name for p in SRC.iterdir())  # nothing written anywhere


def test_package_out_inside_the_logdir_is_refused(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(SRC, logs)
    before = sorted(p.name for p in logs.rglob("*"))
    for out in (logs, logs / "submission", logs / "x" / ".." / "y"):
        done = perfwatch("package", str(logs), "--out", str(out), "--submitter", "acme")
        assert done.returncode == 2 and "is inside the LOGDIR" in done.stderr, done.stderr
    (tmp_path / "link").symlink_to(logs)
    done = perfwatch("package", str(tmp_path / "link"), "--out", str(logs / "sub"), "--submitter", "acme")
    assert done.returncode == 2 and "is inside the LOGDIR" in done.stderr, done.stderr
    assert sorted(p.name for p in logs.rglob("*")) == before


def test_peak_refuses_absurd_thread_counts() -> None:
    out = perfwatch("peak", "--measure", "--threads", "100000")
    assert out.returncode == 2 and "--threads 100000: more than" in out.stderr and "Traceback" not in out.stderr
