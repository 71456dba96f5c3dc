"""Progress and ETA to target quality (core/measure/eta.py) on real eval curves.

The prediction is made from the first half of each bundled run's evals and compared with the time
of the eval that really reached the target; the target values are MLPerf's published ones
(training rules: resnet top-1 0.759, bert mlm_accuracy 0.720, llama2_70b_lora eval loss 0.925,
lower is better), not the ones perfwatch resolves.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from perfwatch.core.ingest.discover import discover
from perfwatch.core.ingest.mllog import Event
from perfwatch.core.measure.eta import Eta, eta_to_target, predict, progress
from perfwatch.core.mlperf.targets import Target
from perfwatch.core.model.book import RunBook
from perfwatch.core.model.run import Run

OFFICIAL = {"resnet": (0.759, True), "bert": (0.720, True), "llama2_70b_lora": (0.925, False)}


def _book(root: Path) -> RunBook:
    book = RunBook(root)
    for path in discover(root):
        book.feed_file(path, path.read_bytes())
    return book


def test_eta_from_half_a_run_lands_within_its_uncertainty(mlperf_logs):
    bounded_in = bounded = lower_held = lower = wrong_verdict = with_rcp = 0
    runs = 0
    for view in _book(mlperf_logs).views():
        target, higher = OFFICIAL[view.benchmark]
        sign = 1 if higher else -1
        reached = next((e for e in view.evals if sign * e.value >= sign * target), None)
        if reached is None:
            continue  # the aborted resnet run never got there: nothing to compare with
        runs += 1
        real = reached.time_ms - view.run_start_ms
        half = view.evals[: max(len(view.evals) // 2, 4)]
        assert all(sign * e.value < sign * target for e in half)
        # the run as it looked halfway: running, its target not reached yet
        live = msgspec.structs.replace(view, phase="running", run_status=None, target_reached=False,
                                   target=Target(view.target.key if view.target else "eval_accuracy", target,
                                                 higher, "MLPerf training rules"))
        eta = eta_to_target(live, half)
        if eta.status != "converging":
            wrong_verdict += 1  # every one of these runs did converge
            continue
        assert eta.at_ms is not None and eta.at_ms > half[-1].time_ms - view.run_start_ms
        with_rcp += "RCP" in eta.reason
        if eta.plus_minus_ms is None:  # "≥": a lower bound
            lower += 1
            lower_held += real >= eta.at_ms - 1000.0  # evals are logged to the millisecond, times rounded
        else:
            bounded += 1
            bounded_in += abs(real - eta.at_ms) <= eta.plus_minus_ms
    landed = bounded_in + lower_held
    print(f"\nETA from the first half of {runs} real runs: {landed} within their stated uncertainty "
          f"({bounded_in} of {bounded} '≈ ±' estimates, {with_rcp} of them bounded by the RCP prior; "
          f"{lower_held} of {lower} '≥' lower bounds); {wrong_verdict} said 'not converging'")
    assert runs == 34
    assert wrong_verdict == 0
    assert landed >= 0.75 * runs
    assert bounded >= 14 and bounded_in >= 0.75 * bounded  # resnet and llama (closed division): bounded


def _points(values, step_ms=60_000.0):
    from perfwatch.core.model.view import EvalPoint

    return [EvalPoint(step_ms * (i + 1), v, float(i + 1), None) for i, v in enumerate(values)]


def test_a_curve_levelling_off_below_the_target_is_not_converging():
    values = [0.30, 0.50, 0.60, 0.65, 0.67, 0.68, 0.685, 0.687, 0.688, 0.688]
    eta = predict(_points(values), 0.759, True, 0.0)
    assert eta.status == "not_converging"
    assert "0.6" in eta.reason and eta.text(600_000.0) == "not converging"


def test_an_exponential_approach_is_predicted_with_a_bounded_uncertainty():
    import math

    values = [0.8 - 0.5 * math.exp(-0.35 * k) for k in range(1, 7)]  # 0.7388 at epoch 6; 0.759 first at 8
    truth = next(k for k in range(1, 40) if 0.8 - 0.5 * math.exp(-0.35 * k) >= 0.759)
    eta = predict(_points(values), 0.759, True, 0.0)
    assert eta.status == "converging" and eta.plus_minus_ms is not None
    assert abs(eta.at_ms - truth * 60_000.0) <= eta.plus_minus_ms
    text = eta.text(6 * 60_000.0)
    assert text.startswith("≈") and "±" in text


def test_too_few_evals_and_reached():
    assert predict(_points([0.3, 0.4, 0.5]), 0.759, True, 0.0).status == "too_early"
    assert predict(_points([0.3, 0.5, 0.6, 0.77]), 0.759, True, 0.0).status == "reached"
    assert Eta("too_early").text(1000.0) == "–"


def _run(*events: Event) -> Run:
    run = Run("mlm.r0")
    run.apply(list(events))
    return run


def test_progress_is_against_the_logged_budget_never_the_dataset_size():
    # the case: an MLM at epoch 10 of 30, far past one dataset's worth of samples
    run = _run(
        Event(0.0, "train_samples", 1000), Event(0.0, "max_epochs", 30), Event(0.0, "run_start"),
        *[Event(1000.0 * e, "eval_accuracy", 0.2 + 0.01 * e, metadata={"epoch_num": e, "samples_count": 1000 * e})
          for e in range(1, 11)],
    )
    p = progress(run.view())
    assert (p.done, p.budget, p.unit) == (10, 30, "epoch")
    assert abs(p.fraction - 1 / 3) < 1e-9


def test_without_a_budget_there_is_no_percentage(mlperf_logs):
    from perfwatch.ui.format import progress as cell

    views = _book(Path(mlperf_logs) / "v2.1/MosaicML").views()
    assert views
    for view in views:  # finished BERT runs: the dataset-size share was "0.4 %"
        assert progress(view).fraction is None
        assert "%" not in cell(view)[0]


def test_a_lower_bound_closer_than_one_eval_is_not_shown_and_a_passed_interval_neither():
    # "≥0:04 ≥0:03 … ≥0:00" counting down said nothing: the next eval decides
    bound = Eta("converging", at_ms=100_000.0, step_ms=30_000.0)
    assert bound.text(40_000.0) == "≥1:00"
    assert bound.text(80_000.0) == "–" and bound.remaining_ms(80_000.0) is None  # 20 s left < one eval
    assert bound.text(120_000.0) == "–"
    interval = Eta("converging", at_ms=100_000.0, plus_minus_ms=20_000.0, step_ms=10_000.0)
    assert interval.text(90_000.0) == "≈0:10 ±0:20"
    assert interval.text(115_000.0) == "≈0:00 ±0:20"  # still inside its stated range
    assert interval.text(121_000.0) == "–" and interval.remaining_ms(121_000.0) is None  # past it


def test_one_eval_against_the_trend_does_not_flip_the_verdict():
    import math

    good = [0.8 - 0.5 * math.exp(-0.35 * k) for k in range(1, 8)]
    run = _run(Event(0, "run_start"))
    view = msgspec.structs.replace(run.view(), target=Target("eval_accuracy", 0.759, True, "test"))
    base = eta_to_target(view, _points(good))
    assert base.status == "converging"
    # a dip, then an eval back on the curve: this fit alone levels off short of the target ...
    noisy = [*good, 0.65, good[-1]]
    assert predict(_points(noisy), 0.759, True, 0.0).status == "not_converging"
    # ... but the shown verdict is the majority of the last three fits: still converging
    held = eta_to_target(view, _points(noisy))
    assert held.status == "converging" and "latest eval" in held.reason
