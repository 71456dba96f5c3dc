"""The one table of run states (core/model/status.py): each rule against what a user was told it means
(docs/report.md, "Run states"), written out by hand."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import pytest
from ui_helpers import mllog

from perfwatch.core.control.states import RunState
from perfwatch.core.mlperf.targets import Target
from perfwatch.core.model.run import Run
from perfwatch.core.model.status import count, judge


@dataclass(frozen=True)
class Proc:
    state: RunState
    exit_code: int | None = None
    reason: str | None = None
    stalled: bool = False


TARGET = Target(key="eval_accuracy", value=0.9, higher_is_better=True, source="campaign")


def view(*records: str, target: Target | None = TARGET):
    run = Run("r", target=target)
    run.feed_lines([r.encode() for r in records])
    return run.view()


START = mllog("run_start", None, 0)
HIGH = mllog("eval_accuracy", 0.95, 1000, epoch_num=1)
LOW = mllog("eval_accuracy", 0.5, 1000, epoch_num=1)
SUCCESS = mllog("run_stop", None, 2000, status="success")
ABORTED = mllog("run_stop", None, 2000, status="aborted")


@pytest.mark.parametrize(("v", "proc", "want"), [
    # (state, reason, verdict, failed, kind)
    (None, Proc(RunState.QUEUED), ("queued", "", "not reached", False, "queued")),
    (view(START, HIGH), Proc(RunState.RUNNING), ("running", "", "reached", False, "reached")),
    (view(START, LOW), Proc(RunState.STALLED, stalled=True, reason="no output for 60s"),
     ("stalled", "no output for 60s", "not reached", False, "stalled")),
    (view(START, HIGH), Proc(RunState.STOPPED, -15, "stopped by user (killed by SIGTERM)"),
     ("stopped", "stopped by user (killed by SIGTERM)", "reached", False, "reached")),
    (view(START, LOW), Proc(RunState.KILLED, -9, "killed by user (killed by SIGKILL)"),
     ("killed", "killed by user (killed by SIGKILL)", "not reached", True, "failed")),
    (None, Proc(RunState.FAILED, 2, "exit 2"), ("crashed", "crashed with exit 2", "not reached", True, "failed")),
    (view(START, LOW), Proc(RunState.FAILED, 3, "exit 3; had no output for 60s"),
     ("crashed", "crashed with exit 3; had no output for 60s", "not reached", True, "failed")),
    (None, Proc(RunState.FAILED, None, "needs 2 GPU(s), this host has 0"),
     ("failed", "needs 2 GPU(s), this host has 0", "not reached", True, "failed")),
    (view(START, LOW, SUCCESS), Proc(RunState.SUCCEEDED, 0), ("done", "", "not reached", False, "done")),
    (view(START, HIGH), Proc(RunState.SUCCEEDED, -15, "target reached; stopped by perfwatch"),
     ("done", "target reached; stopped by perfwatch", "reached", False, "reached")),
    (view(START, LOW), Proc(RunState.TIMEOUT, -15, "timeout after 5s (killed by SIGTERM)"),
     ("timeout", "timeout after 5s (killed by SIGTERM)", "not reached", True, "failed")),
    # logs nobody controls
    (view(START, HIGH, SUCCESS), None, ("done", "", "reached", False, "reached")),
    (view(START, LOW, ABORTED), None, ("aborted", "run_stop status aborted", "not reached", True, "failed")),
    (view(START, LOW, SUCCESS, target=None), None, ("done", "", "no target", False, "done")),
    (view(mllog("submission_benchmark", "bert", 0)), None, ("waiting", "", "not reached", False, "queued")),
    (view(START, LOW), None, ("running", "", "not reached", False, "running")),
])
def test_each_state_and_its_words(v, proc, want) -> None:
    s = judge(v, proc, TARGET if v is None else None)  # a run with a log: the log's view carries its target
    assert (s.word, s.reason, s.verdict.value, s.failed, s.kind) == want


def test_counts_add_up_the_states_verdicts_and_failures() -> None:
    statuses = [judge(view(START, HIGH, SUCCESS), None), judge(view(START, LOW, ABORTED), None),
                judge(view(START, LOW, SUCCESS, target=None), None), judge(None, Proc(RunState.QUEUED), None)]
    c = count(statuses)
    assert msgspec.to_builtins(c) == {"runs": 4, "states": {"queued": 1, "done": 2, "aborted": 1}, "reached": 1,
                                      "not_reached": 1, "no_target": 2, "failed": 1, "alive": 0, "ended": 3,
                                      "to_go": 0}
    assert c.target_text() == "1 reached, 1 not reached, 2 no target"


def test_runs_that_may_still_reach_their_target_are_to_go_not_not_reached() -> None:
    statuses = [judge(view(START, HIGH, SUCCESS), None), judge(view(START, LOW), None),  # reached; running
                judge(None, Proc(RunState.QUEUED), TARGET), judge(view(START, LOW, ABORTED), None)]  # queued; ended
    c = count(statuses)
    assert (c.reached, c.not_reached, c.to_go) == (1, 3, 2)
    assert c.target_text() == "1 reached, 2 to go, 1 not reached"


def test_a_log_nobody_controls_that_fell_silent_long_ago_without_run_stop_has_ended() -> None:
    """A published result file cut short (MLPerf v4.1 tinycorp bert result_2 ends at an eval, no run_stop)
    is not `running` a year later; a log silent for an hour still is; placeholder times never end one."""
    oct_10_2024 = 1728590477170  # 2024-10-10 20:01:17 UTC
    cut = view(mllog("run_start", None, oct_10_2024 - 3_600_000), mllog("eval_accuracy", 0.71, oct_10_2024,
                                                                        epoch_num=3))
    day = 24 * 3600 * 1000
    s = judge(cut, None, now_ms=oct_10_2024 + 400 * day)
    assert (s.word, s.reason, s.verdict.value, s.failed) == (
        "unknown", "the log ends without run_stop (last record 2024-10-10 20:01 UTC)", "not reached", True)
    assert judge(cut, None, now_ms=oct_10_2024 + 3_600_000).word == "running"  # an hour: it may go on
    assert judge(cut, None).word == "running"  # no clock given: the log alone
    assert judge(cut, Proc(RunState.RUNNING), now_ms=oct_10_2024 + 400 * day).word == "running"  # its process says
    assert judge(view(START, LOW), None, now_ms=oct_10_2024 + 400 * day).word == "running"  # time_ms 0, 1000
