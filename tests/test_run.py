"""The run model turns mllog events into what a user watches: phase, progress, target, TTT."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from perfwatch.core.ingest.mllog import Event
from perfwatch.core.mlperf.targets import Target
from perfwatch.core.model.run import Run
from perfwatch.core.model.series import Series


def ev(t: float, key: str, value=None, **md) -> Event:
    return Event(time_ms=t, key=key, value=value, metadata=md or None)


def test_phases_and_time_to_train() -> None:
    run = Run("r")
    assert run.view().phase == "waiting"
    run.apply([ev(0, "init_start"), ev(1, "submission_benchmark", "resnet"), ev(2, "global_batch_size", 256)])
    assert run.view().phase == "init"
    run.apply([ev(10, "init_stop"), ev(11, "run_start"), ev(12, "block_start", first_epoch_num=0, epoch_count=1)])
    v = run.view()
    assert v.phase == "running" and v.global_batch_size == 256 and v.time_to_train_ms is None
    run.apply([ev(20, "eval_start", epoch_num=1)])
    assert run.view().phase == "eval"
    run.apply([ev(25, "eval_accuracy", 0.76, epoch_num=1), ev(26, "eval_stop", epoch_num=1)])
    v = run.view()
    assert v.phase == "running" and v.epoch == 1
    # resnet's official target (latest ruleset) is read from mlperf_logging's rules: 0.759
    assert v.target is not None
    assert v.target.value == 0.759 and v.target_reached
    assert v.target_reached_ms == 25
    run.apply([ev(40, "run_stop", status="success")])
    v = run.view()
    assert v.phase == "stopped" and v.run_status == "success"
    assert v.time_to_train_ms == 29
    # this toy log lacks the submission_* keys the rules require: the live checker says so
    assert v.compliance_ok is False and not v.converged
    assert any("submission_org" in f.message for f in v.findings)


def test_campaign_target_wins_and_lower_is_better() -> None:
    run = Run("r", target=Target("eval_accuracy", 0.5, higher_is_better=False))
    run.apply([ev(0, "submission_benchmark", "bert"), ev(1, "run_start"), ev(2, "eval_accuracy", 0.6, epoch_num=1)])
    assert not run.view().target_reached
    run.apply([ev(3, "eval_accuracy", 0.49, epoch_num=2)])
    v = run.view()
    assert v.target_reached and v.best_eval == 0.49
    assert v.target is not None and v.target.value == 0.5


def test_epoch_num_holding_sample_counts_is_read_as_samples() -> None:
    """MLPerf's BERT (and Composer) put the number of samples in epoch_num."""
    run = Run("bert")
    run.apply([
        ev(0, "submission_benchmark", "bert"), ev(1, "global_batch_size", 448), ev(2, "run_start"),
        ev(1000, "eval_accuracy", 0.38, epoch_num=24640), ev(2000, "eval_accuracy", 0.39, epoch_num=49280),
    ])
    v = run.view()
    assert v.samples == 49280 and v.epoch is None
    assert v.throughput_source == "derived"
    assert v.last_throughput is not None and abs(v.last_throughput - 24640.0) < 1e-6  # 24640 samples in one second


def test_tracked_stats_throughput_and_aborted_run() -> None:
    run = Run("r")
    run.apply([ev(0, "run_start")] + [ev(1000 * i, "tracked_stats", {"throughput": 10.0 * i, "loss": 1 / i}, step=i) for i in range(1, 6)])
    run.apply([ev(6000, "run_stop", status="aborted")])
    v = run.view()
    assert v.throughput_source == "tracked_stats"
    assert v.throughput_stats.count == 5 and v.throughput_stats.mean == 30.0
    assert v.tracked["loss"] == 0.2
    assert v.run_status == "aborted" and not v.converged


def test_run_start_pairing_matches_the_summarizer() -> None:
    """A relaunch reusing the log: TTT pairs the last run_start before the first run_stop."""
    run = Run("r")
    run.apply([ev(0, "run_start"), ev(100, "run_start"), ev(150, "run_stop", status="success"),
               ev(200, "run_start"), ev(400, "run_stop", status="success")])
    assert run.view().time_to_train_ms == 50


def test_view_is_immutable_and_cached() -> None:
    run = Run("r")
    run.apply([ev(0, "seed", 3)])
    v1 = run.view()
    assert run.view() is v1
    run.apply([ev(1, "seed", 4)])
    v2 = run.view()
    assert v2 is not v1 and v1.seed == 3 and v2.seed == 4 and v2.version > v1.version
    try:
        v2.params["seed"] = 5  # type: ignore[index]
    except TypeError:
        pass
    else:
        raise AssertionError("RunView.params must be read-only")


def test_workload_logged_target_is_used() -> None:
    run = Run("w")
    run.apply([ev(0, "submission_benchmark", "mlp_regression"),
               ev(1, "perfwatch_target", 0.9, higher_is_better=True),
               ev(2, "eval_accuracy", 0.95, epoch_num=1)])
    v = run.view()
    assert v.target is not None and v.target.source == "workload log" and v.target_reached


def test_series_memory_is_bounded() -> None:
    s = Series(capacity=256)
    for i in range(200_000):
        s.append(float(i), float(i % 7))
    assert len(s) < 256
    st = s.stats()
    assert st.count == 200_000 and st.min == 0 and st.max == 6
    pts = s.points()
    assert pts[-1] == (199_999.0, float(199_999 % 7))  # recent points keep full resolution
    assert pts[0][0] < 2000  # the oldest still covers the start


def test_long_log_memory_stays_flat() -> None:
    run = Run("r")
    run.apply([ev(0, "run_start")])
    batch = [ev(float(i), "tracked_stats", {"throughput": 1.0}, step=i) for i in range(10_000)]
    run.apply(batch)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(20):
        run.apply(batch)
        run.view()
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert grown < 2_000_000, f"run model grew by {grown} bytes over 200k records"


def test_reset_forgets_a_replaced_log(tmp_path: Path) -> None:
    run = Run("r")
    run.apply([ev(0, "run_start"), ev(5, "run_stop", status="success")])
    run.reset()
    v = run.view()
    assert v.run_start_ms is None and v.time_to_train_ms is None and v.phase == "waiting"


def test_series_bulk_extend_equals_one_by_one() -> None:
    import math
    import random

    for trial in range(50):
        a, b = Series(64), Series(64)
        rng = random.Random(trial)
        n = 0
        for _ in range(rng.randint(1, 20)):
            k = rng.randint(0, 200)
            xs = [float(n + i) for i in range(k)]
            ys = [rng.random() * 100 for _ in range(k)]
            n += k
            for x, y in zip(xs, ys, strict=True):
                a.append(x, y)
            b.extend(xs, ys)
            assert a.points() == b.points()
            sa, sb = a.stats(), b.stats()
            assert sa.count == sb.count
            if sa.count:
                assert math.isclose(sa.mean, sb.mean, rel_tol=1e-9)
                assert math.isclose(sa.sd, sb.sd, rel_tol=1e-6, abs_tol=1e-9)
