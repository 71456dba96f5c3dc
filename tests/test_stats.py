"""The speed-up's 95 % interval against a hand computation (and scipy), through `compare` too."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import scipy.stats

from perfwatch.cli import main
from perfwatch.core.results.stats import t_cdf, t_ppf, welch

BERT_BASE = "v2.1/MosaicML/results/8xA100_80GB-baseline/bert"
BERT_FAST = "v2.1/MosaicML/results/8xA100_80GB-methods/bert"


def test_t_quantiles_match_the_table() -> None:
    # printed t tables: t(0.975; 10) = 2.228, t(0.975; 4) = 2.776, t(0.95; 1) = 6.314
    assert t_ppf(0.975, 10) == pytest.approx(2.228138852, abs=1e-8)
    assert t_ppf(0.975, 4) == pytest.approx(2.776445105, abs=1e-8)
    assert t_ppf(0.95, 1) == pytest.approx(6.313751515, abs=1e-8)
    for df in (1.5, 3.7, 17.2, 250.0):
        assert t_ppf(0.975, df) == pytest.approx(scipy.stats.t.ppf(0.975, df), abs=1e-8)
        assert t_cdf(-1.3, df) == pytest.approx(scipy.stats.t.cdf(-1.3, df), abs=1e-10)


def test_welch_interval_by_hand() -> None:
    a = [10.0, 12.0, 11.0, 13.0]
    b = [5.0, 6.0, 5.5]
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ma, mb = sum(la) / 4, sum(lb) / 3
    va = sum((x - ma) ** 2 for x in la) / 3
    vb = sum((x - mb) ** 2 for x in lb) / 2
    se = math.sqrt(va / 4 + vb / 3)
    df = (va / 4 + vb / 3) ** 2 / ((va / 4) ** 2 / 3 + (vb / 3) ** 2 / 2)
    q = scipy.stats.t.ppf(0.975, df)
    w = welch(a, b)
    assert w is not None
    assert w.ratio == pytest.approx(math.exp(ma - mb), rel=1e-12)
    assert w.df == pytest.approx(df, rel=1e-12)
    assert w.low == pytest.approx(math.exp(ma - mb - q * se), rel=1e-9)
    assert w.high == pytest.approx(math.exp(ma - mb + q * se), rel=1e-9)
    # the p-value is Welch's t-test on the log times
    assert w.p_value == pytest.approx(scipy.stats.ttest_ind(la, lb, equal_var=False).pvalue, rel=1e-7)
    assert w.significant
    # runs per side: 2 (z.975 + z.8)^2 s^2 / d^2 with the pooled variance
    need = 2 * (1.959963985 + 0.841621234) ** 2 * ((va + vb) / 2) / (ma - mb) ** 2
    assert w.runs_needed == max(2, math.ceil(need))
    same = welch([10.0, 11.0, 12.0], [10.5, 11.5, 10.9])
    assert same is not None and not same.significant and same.low < 1 < same.high
    assert same.runs_needed is not None and same.runs_needed > 3
    assert welch([10.0], [5.0, 6.0]) is None


def test_compare_prints_interval_significance_and_runs_needed(capsys, mlperf_logs: Path, tmp_path: Path) -> None:
    base, fast = mlperf_logs / BERT_BASE, mlperf_logs / BERT_FAST
    assert main(["compare", str(base), str(fast), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    minutes = {}
    for side, folder in (("a", base), ("b", fast)):
        assert main(["report", str(folder), "--format", "json", "--no-cpu-peak"]) == 0
        minutes[side] = [r["time_to_train_min"] for r in json.loads(capsys.readouterr().out)["runs"]]
    expected = welch(minutes["a"], minutes["b"])
    assert expected is not None
    ci = row["ci95"]
    assert ci["method"] == "Welch t on log time-to-train" and ci["significant"] is True
    assert (ci["low"], ci["high"]) == pytest.approx((expected.low, expected.high))
    assert ci["low"] < row["speedup"] < ci["high"]
    assert main(["compare", str(base), str(fast)]) == 0
    out = capsys.readouterr().out
    assert "95% interval 2.60×–2.85× (Welch t on log time-to-train), significant" in out
    assert "runs per side" in out
    # the same folder against itself: no difference to resolve, not significant
    shutil.copytree(base, tmp_path / "again")
    assert main(["compare", str(base), str(tmp_path / "again"), "--format", "json"]) == 0
    (same,) = json.loads(capsys.readouterr().out)
    assert same["ci95"]["significant"] is False and same["ci95"]["runs_per_side_needed"] is None
