"""Run identity is the file: however the tree's path is spelled, the same runs and scores."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfwatch.cli import main

MOSAIC = "v2.1/MosaicML"


def _report(capsys, root: str) -> dict:
    assert main(["report", root, "--format", "json", "--no-cpu-peak"]) == 0
    return json.loads(capsys.readouterr().out)


def _identity(rep: dict) -> tuple:
    runs = sorted((r["run_id"], r["path"], r["time_to_train_ms"], r["throughput_mean"]) for r in rep["runs"])
    benches = sorted((b["folder"], b["runs"], b["score_minutes"]) for b in rep["benchmarks"])
    return runs, benches


@pytest.fixture
def spellings(tmp_path: Path, mlperf_logs: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The MosaicML org folder named four ways: absolute, relative, with `..`, through a symlink."""
    org = mlperf_logs / MOSAIC
    link = tmp_path / "linked"
    link.symlink_to(org, target_is_directory=True)
    monkeypatch.chdir(mlperf_logs)
    return {
        "absolute": str(org),
        "relative": MOSAIC,
        "dotdot": os.path.join("v2.1", "Krai", "..", "MosaicML"),
        "symlink": str(link),
    }


def test_org_folder_same_runs_however_spelled(capsys, spellings: dict[str, str], official_scores: dict) -> None:
    reports = {name: _report(capsys, root) for name, root in spellings.items()}
    first = _identity(reports["absolute"])
    for name, rep in reports.items():
        assert _identity(rep) == first, name
    rep = reports["relative"]
    # baseline's and methods' bert/result_N.txt are 20 separate runs, each a readable unique id
    ids = [r["run_id"] for r in rep["runs"]]
    assert len(ids) == 20 == len(set(ids))
    assert "results/8xA100_80GB-baseline/bert/result_0" in ids
    assert "results/8xA100_80GB-methods/bert/result_0" in ids
    # each system's benchmark folder is its own score, equal to MLPerf's summarizer
    scores = {b["folder"]: b["score_minutes"] for b in rep["benchmarks"]}
    assert len(scores) == 2
    for system in ("8xA100_80GB-baseline", "8xA100_80GB-methods"):
        official = official_scores[f"{MOSAIC}/results/{system}/bert"]["official"]["score"]
        assert scores[f"results/{system}/bert"] == pytest.approx(official, abs=1e-9)
    # one file, one run: no run was fed twice ("two init_start sequences")
    for row in rep["runs"][::7]:
        alone = _report(capsys, str(Path(spellings["absolute"]) / row["path"]))["runs"]
        assert [(r["time_to_train_ms"], r["throughput_mean"]) for r in alone] == [
            (row["time_to_train_ms"], row["throughput_mean"])]
    assert not any("init_start" in f for r in rep["runs"] for f in r["findings"])


def test_whole_tree_relative_from_repo_root(capsys, mlperf_logs: Path, official_scores: dict,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's example: `perfwatch report tests/data/mlperf-logs` from the repository root."""
    monkeypatch.chdir(mlperf_logs.parent.parent.parent)
    rel = _report(capsys, "tests/data/mlperf-logs")
    absolute = _report(capsys, str(mlperf_logs))
    assert _identity(rel) == _identity(absolute)
    assert len(rel["runs"]) == 35
    scores = {b["folder"]: b["score_minutes"] for b in rel["benchmarks"]}
    assert scores.keys() == official_scores.keys()
    for folder, off in official_scores.items():
        assert scores[folder] == pytest.approx(off["official"]["score"], abs=1e-9)


def test_check_run_ids_do_not_depend_on_spelling(capsys, spellings: dict[str, str]) -> None:
    seen = {}
    for name, root in spellings.items():
        main(["check", root, "--format", "json"])
        seen[name] = sorted((r["run_id"], r["passed"]) for r in json.loads(capsys.readouterr().out))
    assert len(seen["absolute"]) == 20
    assert all(v == seen["absolute"] for v in seen.values())


def test_perfwatch_logdir_by_relative_path(capsys, tmp_path: Path, mlperf_logs: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A LOGDIR of run folders opened as `.` or `logs` is one run per folder, not one run named `logs`."""
    src = mlperf_logs / MOSAIC / "results/8xA100_80GB-baseline/bert"
    for i in range(3):
        run = tmp_path / "logs" / f"bert.r{i}"
        run.mkdir(parents=True)
        (run / "mllog.txt").write_bytes((src / f"result_{i}.txt").read_bytes())
    monkeypatch.chdir(tmp_path)
    for root in ("logs", "./logs/", "logs/../logs"):
        rep = _report(capsys, root)
        assert sorted(r["run_id"] for r in rep["runs"]) == ["bert.r0", "bert.r1", "bert.r2"], root
    monkeypatch.chdir(tmp_path / "logs")
    assert sorted(r["run_id"] for r in _report(capsys, ".")["runs"]) == ["bert.r0", "bert.r1", "bert.r2"]
