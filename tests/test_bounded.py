"""Official code is bounded: only files perfwatch parsed as valid mllog are handed to it, in a worker with a
time budget, and it never writes into the user's tree."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
KRAI = DATA / "mlperf-logs/v2.1/Krai"
RESNET = "results/7920T_2xA5000_mxnet22.08/resnet"
JUNK_MB = 20


def _perfwatch(*argv: str, cache: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}  # an empty cache: the checkers really run
    return subprocess.run([sys.executable, "-m", "perfwatch", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def _digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """Krai's closed resnet folder (an RCP applies) with one 20 MB line carrying the MLLOG token in result_2."""
    tree = tmp_path / "v2.1/Krai"
    shutil.copytree(KRAI, tree)
    with open(tree / RESNET / "result_2.txt", "a", encoding="latin-1") as fh:
        fh.write(":::MLLOG " + "{" * (JUNK_MB << 20) + "\n")
    return tree


def test_report_on_a_hostile_folder_finishes_and_names_the_file(hostile: Path, tmp_path: Path) -> None:
    before = _digest(hostile)
    done = _perfwatch("report", str(hostile), "--format", "json", cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    (bench,) = json.loads(done.stdout)["benchmarks"]
    assert bench["rcp"]["verdict"] == "n/a"
    assert "result_2.txt" in bench["rcp"]["message"] and "do not parse" in bench["rcp"]["message"]
    row = next(r for r in json.loads(done.stdout)["runs"] if r["path"].endswith("result_2.txt"))
    assert row["compliance"] == "fail" and row["bad_lines"] == 1
    assert _digest(hostile) == before


def test_check_on_a_hostile_folder_runs_the_others_and_names_the_file(hostile: Path, tmp_path: Path) -> None:
    before = _digest(hostile)
    done = _perfwatch("check", str(hostile), "--format", "json", cache=tmp_path / "cache")
    results = {Path(r["path"]).name: r for r in json.loads(done.stdout)}
    assert results["result_2.txt"]["passed"] is False
    assert "not run" in results["result_2.txt"]["error"] and "do not parse" in results["result_2.txt"]["error"]
    # the others were judged by the official checker itself (its log says so)
    assert results["result_0.txt"]["passed"] is True
    assert any("Running compliance on file" in line for line in results["result_0.txt"]["log"])
    assert _digest(hostile) == before


def test_a_call_past_its_budget_is_stopped_and_the_next_one_works() -> None:
    from perfwatch.core.mlperf import bounded

    worker = bounded.Worker()
    try:
        src = KRAI / RESNET
        paths = [str(p) for p in sorted(src.glob("result_*.txt"))]
        with pytest.raises(bounded.OfficialTimeout):
            worker.call("rcp", {"paths": paths, "benchmark": "resnet", "ruleset": "2.1.0", "as_benchmark": False},
                        0.01)  # the worker cannot even import in 10 ms
        answer = worker.call("rcp", {"paths": paths, "benchmark": "resnet", "ruleset": "2.1.0",
                                     "as_benchmark": False}, 120)
        assert answer["verdict"] == "pass"
    finally:
        worker.close()
