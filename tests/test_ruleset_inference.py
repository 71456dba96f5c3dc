"""One ruleset inference for every command: the log's date is its first dated record (a `cache_clear` at
time_ms 0 does not date it), with its evidence, saying which other rulesets fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfwatch.cli import main

KRAI = Path(__file__).parent / "data/mlperf-logs/v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_0.txt"
ZERO = ':::MLLOG {"namespace": "", "time_ms": 0, "event_type": "POINT_IN_TIME", "key": "cache_clear", ' \
       '"value": true, "metadata": {}}\n'


@pytest.fixture
def undated_first(tmp_path: Path) -> Path:
    """Krai's v2.1 resnet run, out of its tree (no round in the path), with a cache_clear at time_ms 0 first."""
    log = tmp_path / "runs" / "result_0.txt"
    log.parent.mkdir()
    log.write_text(ZERO + KRAI.read_text(encoding="latin-1"), encoding="latin-1")
    return log


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    main(list(argv))
    return json.loads(capsys.readouterr().out)


def test_report_check_and_live_checks_infer_the_same_ruleset(capsys: pytest.CaptureFixture[str],
                                                             undated_first: Path) -> None:
    from perfwatch.core.ingest.mllog import parse_path
    from perfwatch.core.mlperf.live_checks import check_events

    (checked,) = _out(capsys, "check", str(undated_first), "--format", "json")  # type: ignore[misc]
    report = _out(capsys, "report", str(undated_first.parent), "--format", "json")
    (run,) = report["runs"]  # type: ignore[index]
    assert checked["ruleset"] == run["ruleset"] == "2.1.0"
    assert checked["ruleset_why"] == run["ruleset_why"]
    why = run["ruleset_why"]
    assert why.startswith("inferred from the log: run dated 2022-")  # the date is the evidence, not 1970
    assert "v3.0" in why and "list resnet too" in why and "--ruleset settles it" in why
    events, _ = parse_path(str(undated_first))
    live = check_events(events)
    assert live.ruleset == "2.1.0"


def test_the_path_or_the_option_settles_it(capsys: pytest.CaptureFixture[str], undated_first: Path) -> None:
    report = _out(capsys, "report", str(undated_first.parent), "--format", "json", "--ruleset", "3.0.0")
    assert report["runs"][0]["ruleset"] == "3.0.0"  # type: ignore[index]
    assert report["runs"][0]["ruleset_why"] == "--ruleset 3.0.0"  # type: ignore[index]


def test_only_dated_times_date_a_log() -> None:
    from perfwatch.core.mlperf.rulesets import choose, is_dated, log_date_ms

    assert not is_dated(0) and not is_dated(12_345) and is_dated(1_665_000_000_000)
    assert log_date_ms([0, 0, 1_665_000_000_000, 5]) == 1_665_000_000_000
    undated = choose(None, None, "resnet", 0)
    assert undated.source == "benchmark" and "no dated record" in undated.why and undated.also
