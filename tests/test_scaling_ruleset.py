"""scaling.json and the ruleset: scores as MLPerf's summarizer gives them, judged by the right rules."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from perfwatch.cli import main

LLAMA = "v4.0/NVIDIA/results/h200_ngc24.04_nemo/llama2_70b_lora"
BERT = "v2.1/MosaicML/results/8xA100_80GB-methods/bert"


def _report(capsys, *argv: str) -> dict:
    assert main(["report", *argv, "--format", "json", "--no-cpu-peak"]) == 0
    return json.loads(capsys.readouterr().out)


def _summarizer(folder: Path, bench: str, ruleset: str) -> tuple[float, float]:
    from mlperf_logging.result_summarizer import result_summarizer as rs

    with contextlib.redirect_stdout(io.StringIO()):
        score, _power, factor = rs._compute_strong_score_standalone(bench, "sys", False, str(folder), "training",
                                                                    ruleset)
    return score, factor


def test_scaling_json_multiplies_the_olympic_mean_as_the_summarizer(capsys, tmp_path: Path, mlperf_logs: Path) -> None:
    folder = tmp_path / "v2.1/results/sys/bert"
    shutil.copytree(mlperf_logs / BERT, folder)
    plain, _ = _summarizer(folder, "bert", "2.1.0")
    (folder / "scaling.json").write_text(json.dumps({"scaling_factor": 1.0123456}))
    official, factor = _summarizer(folder, "bert", "2.1.0")
    assert factor == 1.0123456 and official != pytest.approx(plain)
    (bench,) = _report(capsys, str(tmp_path))["benchmarks"]
    assert bench["scaling_factor"] == factor
    assert bench["olympic_minutes"] == pytest.approx(plain, abs=1e-12)
    assert bench["score_minutes"] == pytest.approx(official, abs=1e-12)
    for fmt in ("table", "markdown", "html"):
        assert main(["report", str(tmp_path), "--format", fmt, "--no-cpu-peak"]) == 0
        out = capsys.readouterr().out
        assert "1.0123" in out and f"{official:,.3f}" in out, fmt
    assert main(["report", str(tmp_path), "--format", "csv", "--no-cpu-peak"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 10 and {r["scaling_factor"] for r in rows} == {"1.0123456"}
    # compare uses the scaled score: the speed-up is the ratio of official scores
    assert main(["compare", str(mlperf_logs / BERT), str(folder), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["speedup"] == pytest.approx(plain / official, abs=1e-12)
    assert row["b"]["scaling_factor"] == factor


def test_unreadable_scaling_json_gives_no_score(capsys, tmp_path: Path, mlperf_logs: Path) -> None:
    shutil.copytree(mlperf_logs / BERT, tmp_path / "bert")
    (tmp_path / "bert/scaling.json").write_text("{\"factor\": 2}")
    (bench,) = _report(capsys, str(tmp_path / "bert"))["benchmarks"]
    assert bench["score_minutes"] is None and "scaling.json" in bench["note"]


def test_results_folder_copied_out_of_its_tree_scores_as_in_place(capsys, tmp_path: Path, mlperf_logs: Path,
                                                               official_scores: dict) -> None:
    """No `v4.0` in the path: the ruleset is inferred from the logs (dated before v4.0's results)."""
    copy = tmp_path / "llama"
    shutil.copytree(mlperf_logs / LLAMA, copy)
    in_place = _report(capsys, str(mlperf_logs / LLAMA))
    copied = _report(capsys, str(copy))
    (bench,) = copied["benchmarks"]
    assert bench["score_minutes"] == pytest.approx(official_scores[LLAMA]["official"]["score"], abs=1e-9)
    assert bench["score_minutes"] == in_place["benchmarks"][0]["score_minutes"]
    assert bench["ruleset"] == "4.0.0" and "inferred" in bench["ruleset_why"]
    assert in_place["benchmarks"][0]["ruleset_why"].startswith("the version in the path")
    assert all(r["converged"] and r["ruleset"] == "4.0.0" for r in copied["runs"])
    # the official checker agrees with the choice (and says why)
    assert main(["check", str(copy), "--format", "json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {r["ruleset"] for r in results} == {"4.0.0"} and all("inferred" in r["ruleset_why"] for r in results)


@pytest.mark.parametrize("command", ["report", "check", "compare", "package", "attach"])
def test_unknown_ruleset_is_refused_by_every_command(capsys, tmp_path: Path, mlperf_logs: Path,
                                                     command: str) -> None:
    folder = str(mlperf_logs / BERT)
    argv = {"compare": [folder, folder], "package": [folder, "--out", str(tmp_path / "out"), "--submitter", "x"],
            "attach": [folder, "--once"]}.get(command, [folder])
    assert main([command, *argv, "--ruleset", "9.9.9"]) == 2
    err = capsys.readouterr().err
    assert "unknown ruleset '9.9.9'" in err and "4.0.0" in err
    assert not (tmp_path / "out").exists()


def test_given_ruleset_is_said(capsys, mlperf_logs: Path) -> None:
    rep = _report(capsys, str(mlperf_logs / BERT), "--ruleset", "2.1.0")
    assert rep["benchmarks"][0]["ruleset_why"] == "--ruleset 2.1.0"
    assert main(["report", str(mlperf_logs / BERT), "--no-cpu-peak"]) == 0
    assert "ruleset 2.1.0 for" in capsys.readouterr().out
