"""`perfwatch check` gives the official compliance checker's verdict, file by file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_check_breakers import BASES, BREAKERS, DATA, write_broken

from perfwatch.cli import main
from perfwatch.core.mlperf.checker import check_file, find_logs

OFFICIAL_FAILS = {"v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_1.txt"}


def official_passes(path: Path, ruleset: str, tmp: Path) -> bool:
    """The checker run on its own, exactly as a submitter runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
         "--ruleset", ruleset, "--log_output", str(tmp / "official.log"), str(path)],
        cwd=tmp, capture_output=True, text=True, timeout=120,
    )
    return proc.returncode == 0


def test_agrees_with_official_checker_on_every_real_log(tmp_path: Path) -> None:
    logs = find_logs(DATA)
    assert len(logs) == 35
    for path in logs:
        ours = check_file(path)
        assert ours.ruleset == ("2.1.0" if "/v2.1/" in str(path) else "4.0.0")
        assert ours.passed == official_passes(path, ours.ruleset, tmp_path), path
        expected_fail = path.relative_to(DATA).as_posix() in OFFICIAL_FAILS
        assert ours.passed is not expected_fail, path


@pytest.mark.parametrize("base", sorted(BASES))
def test_agrees_with_official_checker_on_broken_copies(tmp_path: Path, base: str) -> None:
    ruleset = BASES[base][1]
    verdicts = {}
    for breaker in BREAKERS:
        path = write_broken(tmp_path, base, breaker)
        ours = check_file(path, ruleset=ruleset)
        assert ours.passed == official_passes(path, ruleset, tmp_path), breaker.__name__
        if not ours.passed:
            assert ours.messages or ours.error, breaker.__name__  # the user is told why
        verdicts[breaker.__name__] = ours.passed
    # the official checker only warns about a duplicate with the same value; the rest must fail
    assert verdicts.pop("dup_run_start_same") is True
    # 31 minutes of init is within the open division's 240 but over the closed division's 30
    assert verdicts.pop("init_took_31_min") is base.startswith("bert-open")
    assert not any(verdicts.values()), verdicts


def test_cli_reports_each_run_and_fails_when_one_fails(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", str(DATA / "v2.1/Krai")])
    out = capsys.readouterr().out
    assert rc == 1
    assert "result_1  2.1.0    resnet            FAIL" in out
    assert "Failed checks for eval_accuracy" in out
    assert out.count("PASS") == 4
    assert "4/5 runs pass" in out


def test_cli_exit_zero_and_json_when_all_pass(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", str(DATA / "v4.0"), "--format", "json"])
    results = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert len(results) == 10
    assert all(r["passed"] and r["ruleset"] == "4.0.0" for r in results)
    assert results[0]["log"][-1].endswith("closed_llama2_70b_lora.yaml")


def test_ruleset_option_overrides_the_path(tmp_path: Path) -> None:
    src = DATA / "v2.1/MosaicML/results/8xA100_80GB-baseline/bert/result_0.txt"
    ours = check_file(src, ruleset="4.0.0")
    assert ours.ruleset == "4.0.0"
    assert ours.passed == official_passes(src, "4.0.0", tmp_path)


def test_perfwatch_logdir_gets_the_ruleset_of_the_logs_round(tmp_path: Path) -> None:
    run = tmp_path / "campaign" / "bert.r0"
    run.mkdir(parents=True)
    (run / "mllog.txt").write_bytes((DATA / "v2.1/MosaicML/results/8xA100_80GB-baseline/bert/result_0.txt")
                                    .read_bytes())
    (run / "output.log").write_text("noise\n")
    [ours] = [check_file(p, root=tmp_path / "campaign") for p in find_logs(tmp_path / "campaign")]
    assert ours.run_id == "bert.r0"
    # no version in the path: the log is dated 2022-10-14, before v2.1's results, a round that lists bert
    assert ours.ruleset == "2.1.0" and "inferred" in ours.ruleset_why
    assert ours.passed == official_passes(run / "mllog.txt", "2.1.0", tmp_path)


def test_bad_input_is_a_clear_error_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["check", str(tmp_path / "empty")]) == 2
    assert "no mllog files" in capsys.readouterr().err
    assert main(["check", str(DATA / "v4.0"), "--ruleset", "9.9"]) == 2
    assert "unknown ruleset" in capsys.readouterr().err
    junk = tmp_path / "junk" / "result_0.txt"
    junk.parent.mkdir()
    junk.write_bytes(b"\xff\xfe:::MLLOG \x00\x01{not json\n" * 50)
    assert main(["check", str(junk.parent)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "parsing errors" in out


def test_a_log_cannot_make_the_checker_run_planted_rules(tmp_path: Path) -> None:
    """The checker builds `training_X/{division}_common.yaml` from the log and executes its code."""
    import os

    from perfwatch.core.ingest.mllog import parse_path
    from perfwatch.core.mlperf.live_checks import LiveChecker
    from perfwatch.core.mlperf.targets import RULES_DIR

    marker = tmp_path / "pwned"
    (tmp_path / "evil_common.yaml").write_text(f"- BEGIN:\n    CODE: \" open({str(marker)!r}, 'w') \"\n")
    division = os.path.relpath(tmp_path / "evil", RULES_DIR / "training_2.1.0")
    src = DATA / "v2.1/MosaicML/results/8xA100_80GB-baseline/bert/result_0.txt"
    log = tmp_path / "result_0.txt"
    log.write_text(src.read_text().replace('"value": "open"', f'"value": {json.dumps(division)}', 1))
    ours = check_file(log, ruleset="2.1.0")
    assert not ours.passed and ours.error and "outside its package" in ours.error
    events, _ = parse_path(str(log))
    live = LiveChecker("2.1.0")
    live.apply(events)
    live.finish()
    assert any(f.rule == "config" for f in live.errors())
    assert not marker.exists()


@pytest.mark.parametrize("bench", ["mlp_regression", "not_a_benchmark"])
def test_perfwatch_workload_names_use_the_shipped_rules(tmp_path: Path, bench: str) -> None:
    src = DATA / "v2.1/MosaicML/results/8xA100_80GB-baseline/bert/result_0.txt"
    log = tmp_path / "mlp.r0" / "mllog.txt"
    log.parent.mkdir()
    log.write_text(src.read_text().replace('"value": "bert"', f'"value": "{bench}"', 1))
    ours = check_file(log, root=tmp_path)
    argv = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--ruleset", ours.ruleset or "",
            "--log_output", str(tmp_path / "cc.log")]
    if bench == "mlp_regression":
        assert ours.config and ours.config.endswith("training_6.1.0_perfwatch.yaml")
        argv += ["--config", ours.config]
    else:
        assert ours.config == "training_6.1.0/common.yaml"
        assert "not an MLPerf benchmark" in ours.messages[0]
    proc = subprocess.run([*argv, str(log)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ours.passed == (proc.returncode == 0)
    # a 2.1 bert log lacks keys the 6.1 rules require; the workload name itself is accepted
    named = [m for m in ours.messages if "submission_benchmark" in m]
    assert bool(named) is (bench != "mlp_regression")
