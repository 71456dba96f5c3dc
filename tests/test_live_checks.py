"""Live findings predict the official checker's verdict: pass <-> no error findings."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_check_breakers import BASES, BREAKERS, DATA, relaunch_reused_file, write_broken

from perfwatch.core.ingest.mllog import Event, parse_path
from perfwatch.core.mlperf.checker import check_file, find_logs
from perfwatch.core.mlperf.live_checks import LiveChecker, check_events, init_budget_minutes


def live(path: Path, ruleset: str) -> LiveChecker:
    events, parser = parse_path(str(path))
    return check_events(events, ruleset, bad_lines=parser.bad_count)


def test_live_verdict_matches_official_on_every_real_log() -> None:
    for path in find_logs(DATA):
        official = check_file(path)
        checker = live(path, official.ruleset or "")
        assert checker.passed == official.passed, (path, checker.findings())
    krai = DATA / "v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_1.txt"
    [finding] = live(krai, "2.1.0").errors()
    assert finding.rule == "target" and "eval_accuracy" in finding.message


@pytest.mark.parametrize("base", sorted(BASES))
def test_live_verdict_matches_official_on_broken_copies(tmp_path: Path, base: str) -> None:
    ruleset = BASES[base][1]
    for breaker in BREAKERS:
        path = write_broken(tmp_path, base, breaker)
        official = check_file(path, ruleset=ruleset)
        checker = live(path, ruleset)
        assert checker.passed == official.passed, (breaker.__name__, checker.findings(), official.messages)


def test_end_blocks_are_judged_live(tmp_path: Path) -> None:
    """END blocks use the checker's cross-line state: closed resnet's list of initialized tensors, built
    by each weights_initialization record's POST and compared at the end."""
    src = DATA / "v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_0.txt"
    lines = src.read_text(encoding="latin-1").splitlines()
    i = next(n for n, ln in enumerate(lines) if '"key": "weights_initialization"' in ln)
    broken = tmp_path / "result_0.txt"
    broken.write_text("\n".join(lines[:i] + lines[i + 1:]) + "\n", encoding="latin-1")
    assert check_file(broken, ruleset="2.1.0").passed is False
    judged = live(broken, "2.1.0")
    assert judged.passed is False
    assert any(f.rule == "end" and "initialized_tensors" in f.message for f in judged.errors())
    assert live(src, "2.1.0").passed is check_file(src, ruleset="2.1.0").passed is True


def test_findings_appear_while_the_run_is_going() -> None:
    src, ruleset = BASES["llama-closed-4.0"]
    events, _ = parse_path(str(src))
    lines = src.read_text(encoding="latin-1").splitlines()
    relaunched, _ = parse_path_lines(relaunch_reused_file(lines))
    checker = LiveChecker(ruleset)
    second_init = len(events) + next(i for i, e in enumerate(events) if e.key == "init_start")
    checker.apply(relaunched[:second_init])
    assert checker.passed is True  # the first launch on its own is compliant
    checker.apply(relaunched[second_init : second_init + 1])  # the relaunch logs init_start again
    assert checker.passed is False
    assert any(f.rule == "relaunch" for f in checker.errors())


def parse_path_lines(lines: list[str]) -> tuple[list[Event], int]:
    from perfwatch.core.ingest.mllog import LineParser
    parser = LineParser()
    return parser.feed([ln.encode("latin-1") for ln in lines]), parser.bad_count


def test_one_event_at_a_time_equals_one_batch() -> None:
    src, ruleset = BASES["bert-open-2.1"]
    events, _ = parse_path(str(src))
    broken, _ = parse_path_lines(relaunch_reused_file(src.read_text(encoding="latin-1").splitlines()))
    for evs in (events, broken):
        batch = LiveChecker(ruleset)
        batch.apply(evs)
        single = LiveChecker(ruleset)
        for ev in evs:
            single.apply([ev])
        assert batch.findings() == single.findings()


def test_unchecked_keys_change_nothing() -> None:
    src, ruleset = BASES["llama-closed-4.0"]
    events, _ = parse_path(str(src))
    stop = next(i for i, e in enumerate(events) if e.key == "run_stop")
    checker = LiveChecker(ruleset)
    checker.apply(events[:stop])
    before = (checker.version, checker.findings())
    checker.apply([Event(events[stop].time_ms, "tracked_stats", {"throughput": 1.0})] * 1000)
    assert (checker.version, checker.findings()) == before


def test_init_budget_comes_from_the_ruleset_yaml() -> None:
    assert init_budget_minutes("4.0.0", "closed") == 30
    assert init_budget_minutes("4.0.0", "open") == 240


def test_running_run_without_errors_has_no_verdict_yet() -> None:
    src, ruleset = BASES["bert-open-2.1"]
    events, _ = parse_path(str(src))
    checker = LiveChecker(ruleset)
    checker.apply(events[: len(events) // 2])
    assert checker.passed is None and checker.errors() == ()
