"""Only mllog files are logs: a results tree's `.py`, `.pyc` and pasted `.txt` files that mention the MLLOG
token are not runs nor benchmark folders; every `result_*.txt` of a benchmark folder is one of its runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from perfwatch.cli import main

KRAI = Path(__file__).parent / "data/mlperf-logs/v2.1/Krai"
RESNET = "results/7920T_2xA5000_mxnet22.08/resnet"


def test_code_and_screenshots_are_not_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "Krai"
    shutil.copytree(KRAI, tree)
    code = tree / "benchmarks/resnet/implementations/mxnet"
    (code / "__pycache__").mkdir(parents=True)
    (code / "mllog_utils.py").write_text('PREFIX = ":::MLLOG "\nprint(PREFIX + "{" + key + "}")\n')
    (code / "__pycache__/mllog_utils.cpython-311.pyc").write_bytes(b"\x00\x01:::MLLOG \xff\xfe{\x00garbage\n")
    (tree / RESNET / "screenshot.txt").write_text("$ grep run_stop result_0.txt\n:::MLLOG {\"key\": \"run_st…\n")
    assert main(["report", str(tree), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert sorted(Path(r["path"]).name for r in rep["runs"]) == [f"result_{i}.txt" for i in range(5)]
    assert [b["folder"] for b in rep["benchmarks"]] == [RESNET]
    # a result file is reported even when nothing in it decodes: its name says it is a run's log
    (tree / RESNET / "result_5.txt").write_text(':::MLLOG {"key": broken\n')
    assert main(["report", str(tree), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    broken = next(r for r in rep["runs"] if r["path"].endswith("result_5.txt"))
    assert broken["bad_lines"] == 1 and broken["converged"] is False
    assert [b["runs"] for b in rep["benchmarks"]] == [6]


def test_result_files_named_by_job_and_stamp_are_one_folder(capsys: pytest.CaptureFixture[str]) -> None:
    """v4.0 smc-*-power names its result files `result_<job>-<stamp>_N.txt`: one folder, scored."""
    folder = Path(__file__).parent / "data/mlperf-power/v4.0/smc-dc-power/results/1xSMC-H100-SXM-80GB/resnet"
    assert main(["report", str(folder), "--format", "json"]) == 0
    (bench,) = json.loads(capsys.readouterr().out)["benchmarks"]
    assert bench["runs"] == 5 and bench["score_minutes"] is not None
