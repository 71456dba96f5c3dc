"""Progress toward what matters, and the ETA to target quality, from a run's eval curve.

Progress: epochs (or samples) against the run's budget when the log names one (`max_epochs`,
`max_steps`, `max_samples`, as the workload logs it), else no percentage at all. MLPerf's
`train_samples` is the dataset size, not a budget: it is never used as one.

ETA to the target: the eval curve (metric against the run's progress coordinate: samples when
every eval has them, else epochs, else time), from its steepest rise on (a flat warm-up says
nothing about the approach), is fitted with saturating curves `y = a - b·g(x)`, `g = exp(-c·x)` or
`g = x^-c` (x scaled to the last eval), `c` on a grid, `a` and `b` by least squares for each `c`.
Every curve whose error is within the 95 % band of the best (a profile over the curvature, both
families) gives a crossing of the target, and so does the recent trend carried on in a straight
line (believed up to twice the progress so far). The crossings are rounded up to the next eval
(the log only says "reached" at an eval) and turned into times with the run's recent time per unit
of progress. Their range is the estimate, "≈ 3:20 ±0:40" (never tighter than one eval interval);
when some curve that fits as well never reaches the target the earliest crossing is only a lower
bound, "≥ 16:00"; when no curve and no trend reaches it, "not converging". For a closed-division
MLPerf run the RCP's epochs (samples) to converge for its batch size, mean ± 2 sd, close such a lower
bound (the "RCP mean epochs as a prior"). Pure Python, a few ms per fit; the engine refits only when a
new eval arrives (the RCP tables are read once per benchmark and batch size).

What is shown (`Eta.text`, `Eta.remaining_ms`): a lower bound only while it is at least one eval
interval and one refit gap (`refit_gap_ms`: 1-10 s) away, an interval only until its end has passed (then nothing until the next eval
refits), nothing once the run stopped (the engine also drops the ETA of a run whose process ended
without a run_stop: killed, crashed). The verdict "not converging"
against an estimate is the majority of the fits on the last three evals, so one noisy eval does not
swing it.

Why a grid over the curvature and not `scipy.optimize.curve_fit`: the estimate's uncertainty is the
set of crossings of *every* curve that fits about as well as the best (a profile over `c`), which is
what the grid computes, with `a` and `b` in closed form for each `c`; `curve_fit` returns one optimum
and a linearised covariance. Measured on the 6,943 fits `benchmarks/replay.py` makes over 232 real
MLPerf runs (v2.1-v5.0): the grid takes 1.7 ms per fit of both families, `curve_fit` 8.7 ms, and
`curve_fit` fails to converge (RuntimeError or OptimizeWarning from sensible starting values) on 1,427
of its 13,886 fits; its lower SSE (below the grid's by more than 1 % on 41 % of inputs, from a `c`
between grid points or outside its range) would not change which curves fit "about as well".

Calibration (`benchmarks/replay.py`, the table in docs/tui.md): BAND, SPREAD and MIN_SPREAD were
varied over the same runs; wider intervals buy little coverage at 50 % of a run (89 % -> 91 % for
1.5x the width), so the stated ± is the profile's range itself.

One computation for every front end: the TUI, `--headless` and `report` call `eta_to_target`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from perfwatch.core.model.view import EvalPoint, RunView

MIN_EVALS = 4  # three parameters: fewer points cannot say anything about the fit
# calibrated by benchmarks/replay.py on real runs (docs/tui.md, "ETA calibration")
BAND = 4.0  # curves within SSE x (1 + BAND / dof) of the best fit count as fitting as well
SPREAD = 1.0  # the stated ± is SPREAD x half the range of the crossings ...
MIN_SPREAD = 1.0  # ... and never less than MIN_SPREAD eval intervals
# How soon after a fit a new eval refits a run's ETA (the engine, and benchmarks/replay.py as it replays):
# REFIT_FRACTION of the run's time so far, between REFIT_MIN_MS and REFIT_MAX_MS. The staleness this
# allows is small against the run's own time scale (the stated ± is about a third of the time left): a
# young run with an eval a second (the demo's runs train 10-30 s) is refitted at nearly every eval, a long
# run with an eval every second costs a fit (1-5 ms) per 10 s, and an MLPerf run's evals, minutes apart,
# are each refitted.
REFIT_MIN_MS = 1_000.0
REFIT_MAX_MS = 10_000.0
REFIT_FRACTION = 0.05
TREND_REACH = 2.0  # a straight line is believed up to twice the progress so far, not beyond
FIT_TAIL = 12  # the last evals fitted: early warm-up plateaus say little about the approach
BUDGET_KEYS = (("max_epochs", "epoch"), ("max_steps", "step"), ("max_samples", "samples"))
_EXP_C = tuple(10 ** (-2 + 4 * i / 79) for i in range(80))  # 0.01 .. 100 per scaled x
_POW_C = tuple(10 ** (-2 + 3 * i / 59) for i in range(60))  # 0.01 .. 10

Status = Literal["reached", "converging", "not_converging", "too_early", "no_target", "stopped"]


@dataclass(frozen=True, slots=True)
class Progress:
    """Where the run is against its budget (None: the log names no budget)."""

    done: float | None  # epochs / steps / samples so far
    budget: float | None
    unit: str  # "epoch", "step", "samples"

    @property
    def fraction(self) -> float | None:
        if self.done is None or not self.budget:
            return None
        return min(max(self.done / self.budget, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class Eta:
    """When the eval metric is expected to reach the target, with its uncertainty."""

    status: Status
    at_ms: float | None = None  # predicted time of the reaching eval, ms since run_start
    plus_minus_ms: float | None = None  # None while converging: at_ms is only a lower bound
    plateau: float | None = None  # the fitted curve's asymptote
    reason: str = ""
    step_ms: float | None = None  # the run's time between evals when fitted
    refit_ms: float = REFIT_MAX_MS  # refit_gap_ms when fitted: a lower bound closer than this is not shown

    def remaining_ms(self, elapsed_ms: float | None) -> float | None:
        """Time left from `elapsed_ms` (the run's time since run_start, as of its latest record), while
        the estimate still says something: None for a lower bound closer than one eval interval or one
        refit gap (`≥0:03` counting down tells nothing: the next eval or refit decides) and for an interval
        whose end has passed (the next eval refits); front ends then show nothing."""
        if self.at_ms is None or self.status != "converging":
            return None
        now = elapsed_ms or 0.0
        left = self.at_ms - now
        if self.plus_minus_ms is None:
            return left if left >= max(self.step_ms or 0.0, self.refit_ms) else None
        if now > self.at_ms + self.plus_minus_ms:
            return None
        return max(left, 0.0)

    def text(self, elapsed_ms: float | None, fmt: Callable[[float | None], str] | None = None) -> str:
        """Short display form: "≈3:20 ±0:40", "≥16:00" (a lower bound), "not converging", "reached", "–"."""
        f = fmt or _fmt
        left = self.remaining_ms(elapsed_ms)
        if left is not None:
            if self.plus_minus_ms is None:
                return f"≥{f(left)}"  # a lower bound: curves that fit as well level off before the target
            return f"≈{f(left)} ±{f(self.plus_minus_ms)}"
        return {"reached": "reached", "not_converging": "not converging"}.get(self.status, "–")


def _fmt(ms: float | None) -> str:
    if ms is None or not math.isfinite(ms):
        return "–"
    s = int(round(ms / 1000))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def refit_gap_ms(elapsed_ms: float | None) -> float:
    """How long after a fit a new eval waits for its refit, `elapsed_ms` being the run's time since
    run_start at that fit (see REFIT_FRACTION)."""
    return min(REFIT_MAX_MS, max(REFIT_MIN_MS, REFIT_FRACTION * (elapsed_ms or 0.0)))


def progress(view: RunView) -> Progress:
    """Epochs/steps/samples against the budget the log names, if any."""
    params = view.params
    for key, unit in BUDGET_KEYS:
        budget = params.get(key)
        if isinstance(budget, int | float) and not isinstance(budget, bool) and budget > 0:
            done = view.epoch if unit == "epoch" else view.samples if unit == "samples" else _steps(view)
            return Progress(done, float(budget), unit)
    if view.epoch is not None:
        return Progress(view.epoch, None, "epoch")
    return Progress(view.samples, None, "samples")


def _steps(view: RunView) -> float | None:
    step = view.tracked.get("step") if view.tracked else None
    return float(step) if isinstance(step, int | float) and not isinstance(step, bool) else None


# ---- the fit ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Fit:
    family: str
    a: float
    b: float
    c: float
    sse: float

    def crossing(self, target: float) -> float | None:
        """Scaled x where a - b·g(x) = target (higher is better), None if never."""
        if self.b <= 0 or self.a <= target:
            return None
        r = (self.a - target) / self.b
        if r <= 0:
            return None
        if self.family == "exp":
            return -math.log(r) / self.c if r < 1 else 0.0
        return r ** (-1.0 / self.c)


def _solve(dy: Sequence[float], my: float, g: Sequence[float]) -> tuple[float, float, float]:
    """Least squares of y = a - b·g, the ys given centred (dy = y - my): (a, b, sse)."""
    n = len(g)
    mg = sum(g) / n
    dg = [gi - mg for gi in g]
    sgg = sum(map(operator.mul, dg, dg))
    if sgg <= 1e-300:
        return my, 0.0, sum(map(operator.mul, dy, dy))
    b = -sum(map(operator.mul, dg, dy)) / sgg
    a = my + b * mg
    r = [d + b * e for d, e in zip(dy, dg, strict=True)]  # y - (a - b·g)
    return a, b, sum(map(operator.mul, r, r))


def _fits(xs: Sequence[float], ys: Sequence[float]) -> list[_Fit]:
    """The least-squares fit for every curvature `c` of both families (b > 0: an improving curve).
    140 fits of ~12 points each time a run's eval arrives: kept to C-level sums (the live engine's cost)."""
    out: list[_Fit] = []
    my = sum(ys) / len(ys)
    dy = [y - my for y in ys]
    exp = math.exp
    for c in _EXP_C:
        a, b, sse = _solve(dy, my, [exp(-c * x) for x in xs])
        if b > 0:
            out.append(_Fit("exp", a, b, c, sse))
    for c in _POW_C:
        a, b, sse = _solve(dy, my, [x ** (-c) for x in xs])
        if b > 0:
            out.append(_Fit("pow", a, b, c, sse))
    return out


def _start(ys: Sequence[float]) -> int:
    """Fit from the steepest improvement on: a flat warm-up before it says nothing about the approach."""
    if len(ys) <= MIN_EVALS:
        return 0
    jumps = [b - a for a, b in zip(ys, ys[1:], strict=False)]
    i = max(range(len(jumps)), key=jumps.__getitem__)
    return min(i, len(ys) - MIN_EVALS)


def _coordinate(evals: Sequence[EvalPoint], start_ms: float) -> list[float]:
    if all(e.samples is not None for e in evals):
        return [float(e.samples) for e in evals]  # type: ignore[arg-type]
    if all(e.epoch is not None for e in evals):
        return [float(e.epoch) for e in evals]  # type: ignore[arg-type]
    return [e.time_ms - start_ms for e in evals]


def _ms_per_unit(xs: Sequence[float], ts: Sequence[float]) -> float | None:
    """Recent time per unit of progress: least-squares slope over the last (up to) 5 evals."""
    xs, ts = xs[-5:], ts[-5:]
    n = len(xs)
    mx, mt = sum(xs) / n, sum(ts) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (t - mt) for x, t in zip(xs, ts, strict=True)) / sxx
    return slope if slope > 0 else None


def eta_to_target(view: RunView, evals: Sequence[EvalPoint] | None = None, *, prior: bool = True) -> Eta:
    """The ETA of `view`'s run to its target (`evals` overrides the run's evals, for tests).

    For a closed-division MLPerf run whose ruleset has an RCP for its benchmark and batch size, the
    RCP's epochs (samples) to converge, mean ± 2 standard deviations, bound the estimate where the
    curve alone only gives a lower bound (`prior=False`: the curve alone).

    The verdict between "converging" and "not converging" is the majority of the fits on the last three
    evals: one eval that flips it (a noisy metric: UNet3D's dice) keeps the earlier fit shown."""
    target = view.target
    if target is None:
        return Eta("no_target", reason="no target for this run")
    if view.target_reached:
        return Eta("reached", at_ms=view.time_to_train_ms)
    if view.phase == "stopped":
        return Eta("stopped", reason="the run stopped before its target")
    points = list(evals if evals is not None else view.evals)
    start = view.run_start_ms if view.run_start_ms is not None else (points[0].time_ms if points else 0.0)
    eta = _with_prior(view, points, start, prior)
    if eta.status not in _VERDICTS or len(points) < MIN_EVALS + 2:
        return eta
    # the verdict of the majority of the fits on the last three evals; shown by the latest fit saying it
    fits = [eta, _with_prior(view, points[:-1], start, prior), _with_prior(view, points[:-2], start, prior)]
    votes: list[Status] = [f.status for f in fits if f.status in _VERDICTS]
    verdict = max(_VERDICTS, key=votes.count)
    if eta.status == verdict or votes.count(verdict) < 2:
        return eta
    held = next(f for f in fits if f.status == verdict)
    why = "the latest eval alone says otherwise"
    return replace(held, reason=f"{held.reason}; {why}" if held.reason else why)


_VERDICTS: tuple[Status, ...] = ("converging", "not_converging")


def _with_prior(view: RunView, points: Sequence[EvalPoint], start: float, prior: bool) -> Eta:
    target = view.target
    assert target is not None
    eta = predict(points, target.value, target.higher_is_better, start)
    rcp = rcp_prior(view) if prior and eta.status == "converging" and eta.plus_minus_ms is None else None
    return _bounded_by(eta, rcp, points, start) if rcp is not None else eta


def rcp_prior(view: RunView) -> tuple[float, float, str] | None:
    """(mean, standard deviation, unit) of the RCP's epochs (or samples) to converge for this run's
    benchmark, ruleset and global batch size, as mlperf_logging's RCP checker picks the record
    (found, interpolated, or the smallest batch size); None where no RCP applies."""
    from perfwatch.core.mlperf import rcp

    # the log's own benchmark only: a campaign's stand-in (`mlperf:`) may converge on another scale (a toy
    # rehearsal of bert), and the prior would turn the curve's honest lower bound into a confident guess
    if rcp.not_applicable(view.benchmark, view.ruleset, view.division) is not None or not view.global_batch_size:
        return None
    from perfwatch.core.mlperf.rcp import convergence_prior

    return convergence_prior(str(view.benchmark), str(view.ruleset), int(view.global_batch_size))


def _bounded_by(eta: Eta, prior: tuple[float, float, str], points: Sequence[EvalPoint], start: float) -> Eta:
    """A lower bound from the curve, closed by the RCP prior where the two agree."""
    mean, std, unit = prior
    xs = [p.samples if unit == "samples" else p.epoch for p in points]
    if any(x is None for x in xs) or eta.at_ms is None:
        return eta
    ts = [p.time_ms - start for p in points]
    rate = _ms_per_unit([float(x) for x in xs], ts)  # type: ignore[arg-type]
    if rate is None:
        return eta
    last_x, last_t = float(xs[-1]), ts[-1]  # type: ignore[arg-type]
    lo_ms = last_t + (mean - 2 * std - last_x) * rate
    hi_ms = last_t + (mean + 2 * std - last_x) * rate
    if hi_ms < eta.at_ms:
        return eta  # the run is already slower than the RCP allows for: the curve's bound stands
    lo_ms = max(lo_ms, eta.at_ms)
    step = _median([b - a for a, b in zip(ts, ts[1:], strict=False)]) or 0.0
    half = max((hi_ms - lo_ms) / 2, MIN_SPREAD * step)
    return Eta("converging", at_ms=(lo_ms + hi_ms) / 2, plus_minus_ms=half, plateau=eta.plateau, step_ms=step,
               reason=f"with the RCP: {mean:.4g} ± {std:.2g} {unit} to converge")


def predict(points: Sequence[EvalPoint], target: float, higher_is_better: bool, start_ms: float) -> Eta:
    """ETA from eval points alone (see the module docstring)."""
    if len(points) < MIN_EVALS:
        return Eta("too_early", reason=f"{len(points)} evals; the fit needs {MIN_EVALS}")
    sign = 1.0 if higher_is_better else -1.0
    if any(sign * p.value >= sign * target for p in points):
        return Eta("reached")
    xs_all = _coordinate(points, start_ms)
    ts_all = [p.time_ms - start_ms for p in points]
    ys_all = [sign * p.value for p in points]
    first = max(_start(ys_all), len(points) - FIT_TAIL)
    xs, ys, ts = xs_all[first:], ys_all[first:], ts_all[first:]
    scale = xs[-1] if xs[-1] > 0 else 1.0
    sx = [max(x / scale, 1e-6) for x in xs]
    t = sign * target
    fits = _fits(sx, ys)
    step = _median([b - a for a, b in zip(sx, sx[1:], strict=False)]) or 1.0
    limit = 20.0  # beyond 20x the progress so far: no useful prediction
    dof = max(len(sx) - 3, 1)
    best = min(fits, key=lambda f: f.sse) if fits else None
    crossings: list[float] = []
    open_ended = False  # some curve that fits as well never reaches the target: only a lower bound
    if best is not None:
        # every curve that fits about as well as the best (profile over the curvature, both families:
        # SSE within the 95 % band for one parameter) gives a crossing ...
        band = best.sse * (1.0 + BAND / dof) + 1e-15
        for f in fits:
            if f.sse <= band:
                x = f.crossing(t)
                if x is None or x > limit:
                    open_ended = True
                else:
                    crossings.append(x)
    # ... and so does the recent trend carried on in a straight line (the optimistic end: curves that
    # slow down more than a saturating one, e.g. under a learning-rate schedule, lie between the two)
    trend = _trend_crossing(sx, ys, t)
    if trend is not None and trend <= TREND_REACH:
        crossings.append(trend)
    if not crossings:
        plateau = sign * best.a if best is not None else None
        why = f"the curve levels off at {plateau:.4g}, short of {target:.4g}" if plateau is not None else \
            "the metric is not improving"
        return Eta("not_converging", plateau=plateau, reason=why)
    rate = _ms_per_unit([x * scale for x in sx], ts)
    if rate is None:
        return Eta("too_early", reason="no progress between evals")
    evals = sorted(_next_eval(x, sx[-1], step) for x in crossings)
    lo, hi = evals[0], evals[-1]
    plateau = sign * best.a if best is not None else None

    def at(x: float) -> float:
        return ts[-1] + (x - sx[-1]) * scale * rate

    if open_ended:
        return Eta("converging", at_ms=at(lo), plateau=plateau, step_ms=step * scale * rate,
                   refit_ms=refit_gap_ms(ts[-1]),
                   reason="slowing down: some curves that fit as well level off short of the target")
    x_eval = (lo + hi) / 2
    spread = max(SPREAD * (hi - lo) / 2, MIN_SPREAD * step)
    return Eta("converging", at_ms=at(x_eval), plus_minus_ms=spread * scale * rate, plateau=plateau,
               step_ms=step * scale * rate)


def _trend_crossing(xs: Sequence[float], ys: Sequence[float], target: float, k: int = 4) -> float | None:
    """Where a straight line through the last `k` evals reaches the target (None: not improving)."""
    xs, ys = xs[-k:], ys[-k:]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    if slope <= 0:
        return None
    return xs[-1] + (target - (my + slope * (xs[-1] - mx))) / slope


def _next_eval(x: float, last: float, step: float) -> float:
    """The first eval at or after x, evals `step` apart after `last`."""
    if x <= last:
        return last + step
    return last + math.ceil((x - last) / step - 1e-9) * step


def _median(values: Sequence[float]) -> float | None:
    vs = sorted(v for v in values if v > 0)
    if not vs:
        return None
    mid = len(vs) // 2
    return vs[mid] if len(vs) % 2 else (vs[mid - 1] + vs[mid]) / 2
