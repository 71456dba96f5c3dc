"""`report`'s verdicts equal the official checker's on every bundled result file, and a stable-diffusion
folder (rules that build records in a BEGIN block) is scored as MLPerf's result summarizer scores it."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from perfwatch.cli import main

DATA = Path(__file__).parent / "data"
TREES = [DATA / "mlperf-logs", DATA / "mlperf-power", DATA / "mlperf-more"]
SD = DATA / "mlperf-more/v4.0/GigaComputing/results/G593-SD1_pytorch/stable_diffusion"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    main(list(argv))
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("tree", TREES, ids=lambda p: p.name)
def test_report_and_check_never_disagree(capsys: pytest.CaptureFixture[str], tree: Path) -> None:
    checked = _json(capsys, "check", str(tree), "--format", "json")
    reported = _json(capsys, "report", str(tree), "--format", "json")
    official = {r["run_id"]: r["passed"] for r in checked}  # type: ignore[union-attr,index]
    runs = {r["run_id"]: r for r in reported["runs"]}  # type: ignore[index]
    assert official and set(official) == set(runs)
    for run_id, passed in official.items():
        row = runs[run_id]
        assert (row["compliance"] == "pass") is passed, (run_id, row["findings"])
        assert row["converged"] is passed, (run_id, row["status"], row["findings"])


def test_stable_diffusion_is_scored_as_the_summarizer_scores_it(capsys: pytest.CaptureFixture[str]) -> None:
    from mlperf_logging.result_summarizer import result_summarizer as rs

    with contextlib.redirect_stdout(io.StringIO()):
        times, _, score, _, _ = rs._compute_strong_score_standalone(
            "stable_diffusion", "G593-SD1_pytorch", False, str(SD), "training", "4.0.0", return_full_scores=True)
    rep = _json(capsys, "report", str(SD), "--format", "json")
    (bench,) = rep["benchmarks"]  # type: ignore[index]
    assert bench["converged"] == len(times) == 10
    assert bench["score_minutes"] == pytest.approx(score, abs=1e-9)
    for row in rep["runs"]:  # type: ignore[index]
        assert row["time_to_train_min"] == pytest.approx(times[f"{SD}/{Path(row['path']).name}"], abs=1e-9)


def test_live_checker_builds_the_aggregated_evals(tmp_path: Path) -> None:
    """Fewer than two complete FID+CLIP steps fail the rule's AT_LEAST(2), live as in the official checker."""
    from perfwatch.core.ingest.mllog import parse_path
    from perfwatch.core.mlperf.checker import check_file
    from perfwatch.core.mlperf.live_checks import check_events

    src = SD / "result_0.txt"
    lines = src.read_text(encoding="latin-1").splitlines()
    evals = [i for i, ln in enumerate(lines) if '"key": "eval_accuracy"' in ln]
    assert len(evals) >= 4  # FID and CLIP of at least two steps
    kept = [ln for i, ln in enumerate(lines) if i not in evals[2:]]  # one step left
    broken = tmp_path / "result_0.txt"
    broken.write_text("\n".join(kept) + "\n", encoding="latin-1")
    for path, expected in ((src, True), (broken, False)):
        events, parser = parse_path(str(path))
        live = check_events(events, "4.0.0", bad_lines=parser.bad_count)
        assert live.passed is expected is check_file(path, ruleset="4.0.0").passed, path
    events, _ = parse_path(str(broken))
    assert any("aggregated_eval_accuracy" in f.message for f in check_events(events, "4.0.0").errors())


def test_every_rule_file_of_every_ruleset_is_compiled_whole() -> None:
    """Nothing a rule file says is skipped silently: every KEY's CHECK/POST/PRE, BEGIN and END of every
    training ruleset mlperf_logging ships is compiled (the order keys of common.yaml excepted: `_order`)."""
    from perfwatch.core.mlperf import rule_files
    from perfwatch.core.mlperf.live_checks import COMMON_FILE, ORDER_KEYS, load_rule_file
    from perfwatch.core.mlperf.targets import RULES_DIR

    files = sorted(Path(RULES_DIR).glob("training_*/*.yaml"))
    assert len(files) > 100
    builders = 0
    for path in files:
        rf = load_rule_file(str(path))
        for record in rule_files.records(str(path)) or []:
            if "BEGIN" in record:
                assert rf.begin is not None, path
                builders += bool(rf.begin_keys)
            if "END" in record and "CHECK" in record["END"]:
                assert rf.end_checks, path
            key = record.get("KEY")
            if not isinstance(key, dict) or not isinstance(key.get("NAME"), str):
                continue
            rule = rf.keys[key["NAME"]]
            if "POST" in key and not (path.name == COMMON_FILE and key["NAME"] in ORDER_KEYS):
                assert rule.post is not None, (path, key["NAME"])
            if "CHECK" in key and not (path.name == COMMON_FILE and key["NAME"] in ORDER_KEYS):
                texts = key["CHECK"] if isinstance(key["CHECK"], list) else [key["CHECK"]]
                assert len(rule.checks) == len([t for t in texts if t.strip()]), (path, key["NAME"])
    assert builders >= 8  # stable diffusion's aggregated evals, closed and open, v3.1 to v5.0
