"""MLPerf power logs: energy-to-train per run and the energy score per folder, equal to MLCommons' summarizer.

The expected numbers come from mlperf_logging's result summarizer, called here on the same real folders
(tests/data/mlperf-power, MLCommons training_results_v4.0), never from perfwatch.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from perfwatch.cli import main

POWER = Path(__file__).parent / "data" / "mlperf-power"
RESULTS = POWER / "v4.0/smc-dc-power/results"
ONE_NODE = RESULTS / "1xSMC-H100-SXM-80GB/resnet"  # the summarizer computes it
EIGHT_NODES = RESULTS / "8xSMC-H100-SXM-80GB/resnet"  # stop == start in every node log: it divides by zero
RULESET = "4.0.0"


def _summarizer(folder: Path, benchmark: str = "resnet") -> tuple[dict[str, float], dict[str, float], float, float]:
    """(minutes per result file name, joules per result file name, time score, energy score), official."""
    from mlperf_logging.result_summarizer import result_summarizer as rs

    with contextlib.redirect_stdout(io.StringIO()):
        times, joules, score, energy, _ = rs._compute_strong_score_standalone(
            benchmark, folder.parent.name, True, str(folder), "training", RULESET, return_full_scores=True)
    return ({Path(k).name: v for k, v in times.items()}, {Path(k).name: v for k, v in joules.items()},
            score, energy)


def _report(capsys: pytest.CaptureFixture[str], root: Path, fmt: str = "json") -> str:
    assert main(["report", str(root), "--format", fmt]) == 0
    return capsys.readouterr().out


def _tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_energy_per_run_and_score_equal_the_summarizer(capsys: pytest.CaptureFixture[str]) -> None:
    times, joules, score, energy = _summarizer(ONE_NODE)
    assert len(joules) == 5
    rep = json.loads(_report(capsys, ONE_NODE))
    runs = {Path(r["path"]).name: r for r in rep["runs"]}
    assert set(runs) == set(joules)  # result_<job>-<stamp>_N.txt files are the runs; power logs are not
    for name, j in joules.items():
        assert runs[name]["mlperf_energy_j"] == pytest.approx(j, rel=1e-12), name
        assert runs[name]["time_to_train_min"] == pytest.approx(times[name], abs=1e-9)
    (bench,) = rep["benchmarks"]  # one folder: the power/ sub-folders are not benchmark folders
    assert bench["runs"] == 5 and bench["converged"] == 5
    assert bench["energy_score_j"] == pytest.approx(energy, rel=1e-12)
    assert bench["score_minutes"] == pytest.approx(score, abs=1e-9)
    assert bench["energy_source"] == "MLPerf power log"
    assert bench["scaling_factor"] != 1.0  # the energy score carries scaling.json's factor, as the time score


def test_power_logs_are_never_runs_nor_folders(capsys: pytest.CaptureFixture[str]) -> None:
    rep = json.loads(_report(capsys, POWER))
    assert len(rep["runs"]) == 10
    assert not [r for r in rep["runs"] if "/power/" in r["path"]]
    assert sorted(b["folder"] for b in rep["benchmarks"]) == [
        "v4.0/smc-dc-power/results/1xSMC-H100-SXM-80GB/resnet", "v4.0/smc-dc-power/results/8xSMC-H100-SXM-80GB/resnet"]


def test_stop_at_the_start_time_says_why_instead_of_dividing_by_zero(capsys: pytest.CaptureFixture[str]) -> None:
    from mlperf_logging.result_summarizer import result_summarizer as rs

    with pytest.raises(ZeroDivisionError), contextlib.redirect_stdout(io.StringIO()):
        rs._compute_strong_score_standalone("resnet", "8x", True, str(EIGHT_NODES), "training", RULESET)
    rep = json.loads(_report(capsys, EIGHT_NODES))
    (bench,) = rep["benchmarks"]
    assert bench["score_minutes"] is not None  # the time score stands
    assert bench["energy_score_j"] is None
    assert "power_measurement_stop at the same time as power_measurement_start" in bench["energy_note"]
    assert "ZeroDivisionError" in bench["energy_note"]
    assert all(r["mlperf_energy_j"] is None and "node_0.txt" in r["mlperf_energy_note"] for r in rep["runs"])
    table = _report(capsys, EIGHT_NODES, "table")
    assert "no energy score: result_4960-240510001147906047118_1/node_0.txt" in table


def _without_bogus_stop(tmp_path: Path) -> Path:
    """The 8-node folder with each node log's misplaced stop record left out: the summarizer then takes
    the last reading as the stop, and adds the switch's `interconnect_power_est`."""
    copy = tmp_path / "results/8xSMC-H100-SXM-80GB/resnet"
    shutil.copytree(EIGHT_NODES, copy)
    for node in copy.glob("power/*/node_*.txt"):
        lines = node.read_text().splitlines(keepends=True)
        node.write_text("".join(x for x in lines if '"power_measurement_stop"' not in x))
    return copy


def test_switch_energy_and_missing_stop_equal_the_summarizer(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from mlperf_logging.compliance_checker.mlp_parser import parse_file
    from mlperf_logging.result_summarizer import result_summarizer as rs

    folder = _without_bogus_stop(tmp_path)
    _, joules, _, energy = _summarizer(folder)
    rep = json.loads(_report(capsys, folder))
    runs = {Path(r["path"]).name: r for r in rep["runs"]}
    for name, j in joules.items():
        assert runs[name]["mlperf_energy_j"] == pytest.approx(j, rel=1e-12), name
    assert rep["benchmarks"][0]["energy_score_j"] == pytest.approx(energy, rel=1e-12)
    # the switch's share is in it: the summarizer's own switch function on the real sw_0.txt
    from perfwatch.core.mlperf import power

    sw = sorted(folder.glob("power/*/sw_0.txt"))[0]
    loglines, _ = parse_file(str(sw), RULESET)
    only_switch = power.PowerLogs(str(sw.parent), (), (power.read_switch(sw),))
    assert only_switch.energy_j(152451.0) == rs._compute_power_sw(loglines, 152451.0) == 16100 * 152451.0 / 1000


def test_every_format_shows_the_same_energy(capsys: pytest.CaptureFixture[str]) -> None:
    rep = json.loads(_report(capsys, ONE_NODE))
    score = rep["benchmarks"][0]["energy_score_j"]
    first = rep["runs"][0]
    for fmt in ("table", "markdown", "html"):
        text = _report(capsys, ONE_NODE, fmt)
        assert f"{score:,.0f}" in text, fmt
        assert f"{first['mlperf_energy_j']:,.0f}" in text, fmt
        assert "power-log J" in text, fmt
    rows = list(csv.DictReader(io.StringIO(_report(capsys, ONE_NODE, "csv"))))
    by_id = {r["run_id"]: r for r in rows}
    assert float(by_id[first["run_id"]]["mlperf_energy_j"]) == first["mlperf_energy_j"]
    assert float(by_id[first["run_id"]]["group_energy_score_j"]) == score


def test_no_power_column_without_power_logs(capsys: pytest.CaptureFixture[str], mlperf_logs: Path) -> None:
    text = _report(capsys, mlperf_logs / "v2.1/Krai", "table")
    assert "power-log J" not in text and "energy score J" not in text


def test_compare_gives_the_energy_score_ratio_and_its_interval(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    eight = _without_bogus_stop(tmp_path)
    _, _, _, energy_a = _summarizer(ONE_NODE)
    _, _, _, energy_b = _summarizer(eight)
    assert main(["compare", str(ONE_NODE), str(eight), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["a"]["energy_score_j"] == pytest.approx(energy_a, rel=1e-12)
    assert row["b"]["energy_score_j"] == pytest.approx(energy_b, rel=1e-12)
    assert row["energy_score_ratio"] == pytest.approx(energy_a / energy_b, rel=1e-12)
    lo, hi = row["energy_score_interval90"]
    assert lo <= row["energy_score_ratio"] <= hi
    assert main(["compare", str(ONE_NODE), str(eight)]) == 0
    text = capsys.readouterr().out
    assert "energy score (MLPerf power log)" in text and f"{row['energy_score_ratio']:.2f}×" in text


def test_every_command_leaves_the_tree_byte_identical(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(POWER, tree)
    before = _tree_digest(tree)
    for fmt in ("json", "table", "html"):
        _report(capsys, tree, fmt)
    folder = tree / "v4.0/smc-dc-power/results/1xSMC-H100-SXM-80GB/resnet"
    main(["compare", str(folder), str(folder)])
    main(["check", str(folder)])
    main(["check", str(tree), "--format", "json"])
    main(["attach", str(tree), "--once"])
    main(["report", str(tree), "--mila-json", str(tmp_path / "mila")])  # written outside the tree
    capsys.readouterr()
    assert _tree_digest(tree) == before
    assert len(list((tmp_path / "mila").glob("*.json"))) == 10


async def test_campaign_view_shows_the_power_logs_energy_score_report_gives() -> None:
    """The campaign view (g) beside report: the MLPerf energy score of a folder with power logs, or why not."""
    import subprocess
    import sys

    from tests.ui_helpers import attach_app, screen_text, until

    tree = Path(__file__).parent / "data" / "mlperf-power"
    rep = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(tree), "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    scores = [b["energy_score_j"] for b in json.loads(rep.stdout)["benchmarks"] if b.get("energy_score_j")]
    assert len(scores) == 1
    app = attach_app(tree, theme="dark")
    async with app.run_test(size=(220, 40)) as pilot:
        await until(pilot, lambda: "resnet" in screen_text(app), "the runs")
        await pilot.press("g")
        await until(pilot, lambda: "score (power logs)" in screen_text(app), "the energy score")
        text = screen_text(app)
        assert f"{scores[0] / 1e3:.0f} kJ score (power logs)" in text
        assert "power logs: no energy score" in text  # the folder the official computation cannot score
