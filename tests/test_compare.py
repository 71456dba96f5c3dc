"""`perfwatch compare`, the baseline grid and Mila-style run reports, on MLPerf's own published logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfwatch.cli import main
from perfwatch.core.model import book as runbook
from perfwatch.core.results.comparison import baseline_grid, compare, mila_run_report, render_grid

DATA = Path(__file__).parent / "data" / "mlperf-logs"
MOSAIC = DATA / "v2.1/MosaicML/results"
OFFICIAL = json.loads((DATA / "official_scores.json").read_text())


def test_mosaicml_methods_vs_baseline_speedup(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["compare", str(MOSAIC / "8xA100_80GB-baseline/bert"), str(MOSAIC / "8xA100_80GB-methods/bert")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "21.37 min → 7.90 min: 2.71× faster" in out
    assert "spread across seeds: ratio of medians 2.66×, 90% bootstrap interval" in out


def test_speedup_is_the_ratio_of_official_scores(capsys: pytest.CaptureFixture[str]) -> None:
    main(["compare", str(MOSAIC / "8xA100_80GB-baseline"), str(MOSAIC / "8xA100_80GB-methods"), "--format", "json"])
    [row] = json.loads(capsys.readouterr().out)
    base = OFFICIAL["v2.1/MosaicML/results/8xA100_80GB-baseline/bert"]["official"]["score"]
    methods = OFFICIAL["v2.1/MosaicML/results/8xA100_80GB-methods/bert"]["official"]["score"]
    assert row["a"]["score_minutes"] == pytest.approx(base, abs=1e-9)
    assert row["b"]["score_minutes"] == pytest.approx(methods, abs=1e-9)
    assert row["speedup"] == pytest.approx(base / methods, rel=1e-12)
    lo, hi = row["interval90"]
    assert lo < row["speedup"] < hi
    assert row["a"]["min_minutes"] / row["b"]["max_minutes"] <= lo  # within the extreme per-run ratios
    assert hi <= row["a"]["max_minutes"] / row["b"]["min_minutes"]


def test_spread_is_reproducible() -> None:
    a = runbook.load(MOSAIC / "8xA100_80GB-baseline").views()
    b = runbook.load(MOSAIC / "8xA100_80GB-methods").views()
    assert compare(a, b)[0].interval == compare(a, b)[0].interval


def test_non_converged_run_is_dropped_as_slowest() -> None:
    krai = runbook.load(DATA / "v2.1/Krai").views()
    [row] = compare(krai, krai)
    assert row.a is not None and row.a.non_converged == 1
    assert row.a.score == pytest.approx(OFFICIAL["v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet"]["official"]
                                        ["score"], abs=1e-9)
    assert row.speedup == pytest.approx(1.0)


def test_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(tmp_path / "nope"), str(MOSAIC)]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "empty.txt").write_text("nothing here\n")
    assert main(["compare", str(tmp_path), str(MOSAIC)]) == 2
    assert "no mllog records" in capsys.readouterr().err
    # both MosaicML folders on one side: ambiguous, said so, no speed-up invented
    assert main(["compare", str(MOSAIC), str(MOSAIC / "8xA100_80GB-methods")]) == 1
    assert "pass one folder per side" in capsys.readouterr().out


def test_baseline_grid_normalizes_and_takes_geometric_mean() -> None:
    benches = [
        {"folder": "x/results/sysA/b1", "benchmark": "b1", "score_minutes": 10.0},
        {"folder": "x/results/sysA/b2", "benchmark": "b2", "score_minutes": 20.0},
        {"folder": "x/results/sysB/b1", "benchmark": "b1", "score_minutes": 5.0},
        {"folder": "x/results/sysB/b2", "benchmark": "b2", "score_minutes": 40.0},
        {"folder": "x/results/sysC/b1", "benchmark": "b1", "score_minutes": 2.5},
    ]
    grid = baseline_grid(benches, "sysA")
    rows = {r["row"]: r for r in grid["rows"]}
    assert grid["rows"][0]["row"] == "sysA" and rows["sysA"]["geomean"] == pytest.approx(1.0)
    assert rows["sysB"]["ratio"] == {"b1": pytest.approx(2.0), "b2": pytest.approx(0.5)}
    assert rows["sysB"]["geomean"] == pytest.approx(1.0)
    assert rows["sysC"]["ratio"]["b2"] is None and rows["sysC"]["geomean"] == pytest.approx(4.0)
    # a run id selects its group's row
    assert baseline_grid(benches, "x/results/sysB/b1/result_3")["baseline"] == "sysB"
    assert "matches no run" in render_grid(baseline_grid(benches, "../etc"))


def test_grid_on_real_report_rows() -> None:
    from perfwatch.core.results import summary as report

    rep = report.build(runbook.load(MOSAIC))
    text = render_grid(baseline_grid(rep.benchmarks, "8xA100_80GB-baseline"))
    assert "8xA100_80GB-methods   2.71× [2.60–2.85]*    2.71×" in text


def test_mila_run_report_has_train_item_stats_after_warmup() -> None:
    view = runbook.load(MOSAIC / "8xA100_80GB-baseline/bert/result_0.txt").views()[0]
    rep = mila_run_report(view, discard=2)
    item = rep["train_item"]
    assert rep["benchmark"] == "bert" and rep["batch_size"] == 448
    assert item["discarded"] == 2 and item["count"] == len(view.throughput) - 2 > 0
    assert item["min"] <= item["avg"] <= item["max"]
    assert item["range"] == pytest.approx(item["max"] - item["min"])
    assert view.time_to_train_ms is not None
    assert rep["train"]["time_to_train"] == pytest.approx(view.time_to_train_ms / 1000)
    json.dumps(rep)
