"""`perfwatch report` on real MLPerf result logs gives the official times and scores."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from perfwatch.cli import main
from perfwatch.core.model import book as runbook
from perfwatch.core.results import summary as report


def _report_json(capsys, *argv: str) -> dict:
    assert main(["report", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_times_and_scores_match_official(capsys, mlperf_logs: Path, official_scores: dict) -> None:
    rep = _report_json(capsys, str(mlperf_logs))
    runs = {r["path"]: r for r in rep["runs"]}
    benches = {b["folder"]: b for b in rep["benchmarks"]}
    assert set(benches) == set(official_scores)
    for folder, off in official_scores.items():
        for name, minutes in off["official"]["per_file"].items():
            row = runs[f"{folder}/{name}"]
            # to the millisecond: the official value is minutes derived from integer ms
            assert round(minutes * 60_000) == row["time_to_train_ms"], (folder, name)
            assert row["converged"] is True
        assert benches[folder]["score_minutes"] == pytest.approx(off["official"]["score"], abs=1e-9)


def test_non_converged_run_is_reported_and_dropped(capsys, mlperf_logs: Path) -> None:
    rep = _report_json(capsys, str(mlperf_logs / "v2.1/Krai"))
    bad = next(r for r in rep["runs"] if r["path"].endswith("result_1.txt"))
    assert bad["status"] == "aborted"
    assert bad["target_reached"] is False
    assert bad["converged"] is False
    (bench,) = rep["benchmarks"]
    assert bench["runs"] == 5 and bench["converged"] == 4
    assert any(d.endswith("result_1") for d in bench["dropped"])
    assert "non-converged" in bench["note"]


@pytest.mark.parametrize(
    "level",
    ["v4.0/NVIDIA", "v4.0/NVIDIA/results", "v4.0/NVIDIA/results/h200_ngc24.04_nemo",
     "v4.0/NVIDIA/results/h200_ngc24.04_nemo/llama2_70b_lora"],
)
def test_any_level_of_a_results_tree(capsys, mlperf_logs: Path, official_scores: dict, level: str) -> None:
    rep = _report_json(capsys, str(mlperf_logs / level))
    assert len(rep["runs"]) == 10
    (bench,) = rep["benchmarks"]
    expected = official_scores["v4.0/NVIDIA/results/h200_ngc24.04_nemo/llama2_70b_lora"]["official"]["score"]
    assert bench["score_minutes"] == pytest.approx(expected, abs=1e-9)
    # llama2_70b_lora's target is "lower is better" in the 4.0.0 rules
    assert all(r["target"] == "eval_accuracy ≤ 0.925" for r in rep["runs"])
    # tracked_stats throughput is read (samples/s)
    assert all(r["throughput_source"] == "tracked_stats" and r["throughput_mean"] > 2 for r in rep["runs"])


def test_cross_check_with_mlperf_summarizer(tmp_path: Path, mlperf_logs: Path) -> None:
    """mlperf_logging's own summarizer function on the same folders gives the same numbers."""
    from mlperf_logging.result_summarizer import result_summarizer as rs

    folders = {
        "v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet": ("resnet", "2.1.0"),
        "v2.1/MosaicML/results/8xA100_80GB-methods/bert": ("bert", "2.1.0"),
    }
    for folder, (bench, ruleset) in folders.items():
        with contextlib.redirect_stdout(io.StringIO()):
            per_file, _, score, _, _ = rs._compute_strong_score_standalone(
                bench, "sys", False, str(mlperf_logs / folder), "training", ruleset, return_full_scores=True
            )
        book = runbook.load(mlperf_logs / folder)
        rep = report.build(book)
        mine = {Path(r["path"]).name: r["time_to_train_min"] for r in rep.runs if r["converged"]}
        theirs = {Path(k).name: v for k, v in per_file.items()}
        assert mine.keys() == theirs.keys()
        for name, minutes in theirs.items():
            assert mine[name] == pytest.approx(minutes, abs=1e-12)
        assert rep.benchmarks[0]["score_minutes"] == pytest.approx(score, abs=1e-12)


def test_formats(capsys, mlperf_logs: Path) -> None:
    folder = str(mlperf_logs / "v2.1/MosaicML/results/8xA100_80GB-baseline")
    assert main(["report", folder, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 10 and rows[0]["benchmark"] == "bert"
    assert main(["report", folder, "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "| run |" in md and "21.371" in md
    assert main(["report", folder]) == 0
    table = capsys.readouterr().out
    assert "21.371" in table and "bert/result_9" in table


def test_errors_are_clear(capsys, tmp_path: Path) -> None:
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    assert main(["report", str(tmp_path)]) == 1
    assert "no MLLOG records" in capsys.readouterr().err


def test_broken_and_truncated_copies_do_not_crash(capsys, tmp_path: Path, mlperf_logs: Path) -> None:
    src = mlperf_logs / "v2.1/MosaicML/results/8xA100_80GB-methods/bert"
    dst = tmp_path / "bert"
    shutil.copytree(src, dst)
    data = (dst / "result_0.txt").read_bytes()
    (dst / "result_0.txt").write_bytes(data[: len(data) // 2])  # cut mid-line, no run_stop
    raw = (dst / "result_1.txt").read_bytes().replace(b'"time_ms": 1', b'"time_ms": \xff1', 3)
    (dst / "result_1.txt").write_bytes(raw)
    rep = _report_json(capsys, str(tmp_path))
    by = {Path(r["path"]).name: r for r in rep["runs"]}
    # a copy of a 2022 log cut short: no run_stop and silent for years, so it ended, how nobody says
    assert by["result_0.txt"]["status"] == "unknown"
    assert by["result_0.txt"]["reason"].startswith("the log ends without run_stop (last record 2022-")
    assert by["result_0.txt"]["converged"] is False
    assert by["result_1.txt"]["bad_lines"] == 3
    # like the official summarizer, a log with unparsable MLLOG lines fails the checker and is dropped
    assert by["result_1.txt"]["compliance"] == "fail" and by["result_1.txt"]["converged"] is False
    assert rep["benchmarks"][0]["converged"] == 8


def test_baseline_grid_and_mila_reports(capsys, tmp_path: Path, mlperf_logs: Path) -> None:
    folder = str(mlperf_logs / "v2.1/MosaicML")
    rep = _report_json(capsys, folder, "--baseline", "8xA100_80GB-baseline", "--mila-json", str(tmp_path))
    rows = {r["row"]: r for r in rep["baseline_grid"]["rows"]}
    assert rows["8xA100_80GB-methods"]["geomean"] == pytest.approx(21.371129166666666 / 7.895954166666667)
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 20
    one = json.loads(files[0].read_text())
    assert one["benchmark"] == "bert"
    assert main(["report", folder, "--baseline", "no-such-run"]) == 2
    assert "--baseline" in capsys.readouterr().err


def test_live_compliance_verdict_in_report(capsys, mlperf_logs: Path) -> None:
    rep = _report_json(capsys, str(mlperf_logs / "v2.1/Krai"))
    verdicts = {Path(r["path"]).name: r["compliance"] for r in rep["runs"]}
    assert verdicts == {"result_0.txt": "pass", "result_1.txt": "fail", "result_2.txt": "pass",
                        "result_3.txt": "pass", "result_4.txt": "pass"}


def test_one_grouping_rule_for_report_check_and_compare() -> None:
    """`report`'s benchmark folders, `check`'s RCP lines and `compare --baseline` group run ids alike: a
    result file by its folder ("." at the top of the tree), a launched run by its configuration."""
    from perfwatch.core.results.summary import group_of_id

    assert group_of_id("v2.1/Krai/results/x/resnet/result_4") == "v2.1/Krai/results/x/resnet"
    assert group_of_id("result_0") == "."
    assert group_of_id("mlp.bs32.r12") == "mlp.bs32" and group_of_id("sweep/a.r0") == "sweep/a"
    assert group_of_id("mlp.run") == "mlp.run" and group_of_id("resultx") == "resultx"
    # every result_*.txt of a folder, as MLPerf's summarizer globs it (v4.0 smc-*-power name theirs so)
    assert group_of_id("b/result_5119-240510190348838227199_06") == "b" and group_of_id("result_x") == "."


def test_a_run_without_telemetry_gets_what_the_telemetry_reader_would_give(mlperf_logs: Path) -> None:
    """`report` on a results tree imports neither the telemetry reader nor the energy integrator: its runs
    get `columns.NO_TELEMETRY`, which must be what those give a run with no telemetry records."""
    from perfwatch.core.measure import columns

    book = runbook.load(mlperf_logs / "v2.1/MosaicML/results/8xA100_80GB-baseline/bert")
    assert len(book.runs) == 10
    for view in book.views():
        assert columns.TelemetryColumns().columns(view) == columns.NO_TELEMETRY
        row = columns.report_extra(view)
        assert {k: row[k] for k in columns.NO_TELEMETRY} == columns.NO_TELEMETRY
