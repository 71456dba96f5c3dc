"""RunView: the immutable snapshot of a run that the UI, reports and checks read.

Built by `Run.view()` (core/model/run.py) only when something changed; safe to hand to
another thread or widget because nothing in it can be mutated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from perfwatch.core.ingest.mllog import BadLine
from perfwatch.core.mlperf.live_checks import Finding
from perfwatch.core.mlperf.rulesets import StandsFor
from perfwatch.core.mlperf.targets import Target
from perfwatch.core.model.series import Stats


class EvalPoint(msgspec.Struct, frozen=True):
    time_ms: float
    value: float
    epoch: float | None
    samples: float | None


class RunView(msgspec.Struct, frozen=True):
    """Immutable snapshot of a run for the UI, reports and checks."""

    run_id: str
    path: str
    benchmark: str | None
    org: str | None
    platform: str | None
    division: str | None
    submission_status: str | None
    seed: Any
    global_batch_size: int | None
    grad_accum_steps: int | None
    params: Mapping[str, Any]
    phase: str
    run_status: str | None  # run_stop's status: "success", "aborted", ... or None while running
    first_time_ms: float | None
    last_time_ms: float | None
    init_start_ms: float | None
    init_stop_ms: float | None
    run_start_ms: float | None
    run_stop_ms: float | None
    time_to_train_ms: float | None
    epoch: float | None
    samples: float | None
    train_samples: float | None
    target: Target | None
    evals: tuple[EvalPoint, ...]
    last_eval: float | None
    best_eval: float | None
    target_reached: bool
    target_reached_ms: float | None
    throughput: tuple[tuple[float, float], ...]  # (time_ms, count_unit/s), bounded
    throughput_stats: Stats
    throughput_source: str | None  # "tracked_stats" or "derived"
    tracked: Mapping[str, Any]  # the latest tracked_stats value (loss, tokens/s, ...)
    flops_per_sample: float | None
    tokens_per_sample: float | None
    precision: str | None
    world_size: int | None
    records: int
    bad_count: int
    bad_lines: tuple[BadLine, ...]
    non_utf8: int
    key_counts: Mapping[str, int]
    findings: tuple[Finding, ...]  # live MLPerf compliance findings (core/live_checks)
    compliance_ok: bool | None  # the expected verdict of the official checker; None while undecided
    version: int
    ruleset: str | None = None  # the MLPerf ruleset judging the run (None until its benchmark is known)
    ruleset_why: str = ""  # which rule chose it (mlperf/rulesets.py)
    # the campaign's `mlperf:` in effect: set when the job names an MLPerf benchmark and the log names none
    stands_for: StandsFor | None = None
    # what `samples`, the eval points' `samples` and `throughput` count: "samples", or "tokens" (GPT-3)
    count_unit: str = "samples"
    dated_ms: float | None = None  # the log's date for ruleset inference (`rulesets.log_date_ms`)
    # the run's average rate in count_unit/s: each rate weighed by the time it covers (derived: the
    # count gained over the intervals' time; tracked_stats: each value over the time since the last);
    # the plain mean of the points where no time is known. None without a rate.
    throughput_avg: float | None = None

    @property
    def elapsed_ms(self) -> float | None:
        """Time since run_start: time-to-train once stopped, else up to the latest record."""
        if self.time_to_train_ms is not None:
            return self.time_to_train_ms
        if self.run_start_ms is None or self.last_time_ms is None:
            return None
        return max(self.last_time_ms - self.run_start_ms, 0.0)

    @property
    def converged(self) -> bool:
        """What MLPerf's scoring counts: a stopped run with status success that reached its target."""
        target_ok = self.target_reached or self.target is None
        return (
            self.run_status == "success"
            and self.time_to_train_ms is not None
            and target_ok
            and self.compliance_ok is not False  # the summarizer drops runs that fail the checker
        )

    @property
    def last_throughput(self) -> float | None:
        return self.throughput[-1][1] if self.throughput else None
