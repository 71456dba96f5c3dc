"""Throughput and warm-up-discarding statistics over a run (MFU: measure/mfu.py).

Semantics (so numbers agree with the tools users compare against):
- Rolling throughput follows Composer's SpeedMonitor: over the last `window`
  observations, rate = (samples at the end - samples at the start) / (time at
  the end - time at the start): a ratio of sums, not a mean of rates. Per-device
  values are the totals divided by the world size.
- A sample is a sample: with gradient accumulation a "batch" is one optimizer
  step of `global_batch_size` samples (which already includes the accumulation
  and all ranks), so batches/s = samples/s / global_batch_size; accumulation
  never multiplies or divides the sample rate.
- Mila-style train_item statistics drop the first `discard` observations
  (warm-up: compilation, cache filling) before avg/min/max/sd/range.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import msgspec

from perfwatch.core.model.run import RunView

DEFAULT_WINDOW = 100  # SpeedMonitor's default window_size
DEFAULT_DISCARD = 5  # warm-up observations dropped from train_item statistics

class Throughput(msgspec.Struct, frozen=True):
    """Rates over a window, totals over all devices; `device_*` divide by `world_size`."""

    points: int  # observations in the window
    seconds: float | None  # time the window spans
    samples_per_s: float | None
    batches_per_s: float | None
    tokens_per_s: float | None
    flops_per_s: float | None
    world_size: int = 1
    full: bool = False  # the window holds `window` observations (SpeedMonitor logs only then)
    unit: str = "samples"  # what the benchmark counts (RunView.count_unit): "samples" or "tokens"

    @property
    def rate(self) -> float | None:
        """The rate in the benchmark's own unit: tokens/s for GPT-3, samples/s for the others."""
        return self.tokens_per_s if self.unit == "tokens" else self.samples_per_s

    def _dev(self, value: float | None) -> float | None:
        return None if value is None else value / self.world_size

    @property
    def device_samples_per_s(self) -> float | None:
        return self._dev(self.samples_per_s)

    @property
    def device_batches_per_s(self) -> float | None:
        return self._dev(self.batches_per_s)

    @property
    def device_tokens_per_s(self) -> float | None:
        return self._dev(self.tokens_per_s)

    @property
    def device_flops_per_s(self) -> float | None:
        return self._dev(self.flops_per_s)


def _derived(
    samples_per_s: float | None,
    batches_per_s: float | None,
    *,
    points: int,
    seconds: float | None,
    world_size: int,
    full: bool,
    flops_per_sample: float | None,
    tokens_per_sample: float | None,
) -> Throughput:
    sps = samples_per_s
    return Throughput(
        points=points,
        seconds=seconds,
        samples_per_s=sps,
        batches_per_s=batches_per_s,
        tokens_per_s=sps * tokens_per_sample if sps is not None and tokens_per_sample else None,
        flops_per_s=sps * flops_per_sample if sps is not None and flops_per_sample else None,
        world_size=max(int(world_size), 1),
        full=full,
    )


class SpeedWindow:
    """SpeedMonitor over cumulative counters, for code that sees every step (instrumentation, tests).

    Call `observe` once per logged record with the samples it covers and the
    optimizer steps it completed (0 for a micro-batch under gradient accumulation).
    """

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if window < 2:
            raise ValueError("window must be >= 2 observations")
        self.window = window
        self._obs: deque[tuple[float, float, float, float]] = deque(maxlen=window)
        self._samples = 0.0
        self._steps = 0.0
        self._tokens = 0.0

    def observe(self, time_s: float, samples: float, *, steps: float = 1, tokens: float = 0) -> None:
        self._samples += samples
        self._steps += steps
        self._tokens += tokens
        self._obs.append((time_s, self._samples, self._steps, self._tokens))

    def rates(self, *, world_size: int = 1, flops_per_sample: float | None = None) -> Throughput:
        obs = self._obs
        full = len(obs) == self.window
        if len(obs) < 2 or obs[-1][0] <= obs[0][0]:
            return _derived(None, None, points=len(obs), seconds=None, world_size=world_size, full=full,
                            flops_per_sample=flops_per_sample, tokens_per_sample=None)
        dt = obs[-1][0] - obs[0][0]
        sps = (obs[-1][1] - obs[0][1]) / dt
        tp = _derived(sps, (obs[-1][2] - obs[0][2]) / dt, points=len(obs), seconds=dt,
                      world_size=world_size, full=full, flops_per_sample=flops_per_sample, tokens_per_sample=None)
        tokens = obs[-1][3] - obs[0][3]
        if tokens > 0:
            return Throughput(tp.points, tp.seconds, tp.samples_per_s, tp.batches_per_s, tokens / dt,
                              tp.flops_per_s, tp.world_size, tp.full)
        return tp


def window_rate(points: Sequence[tuple[float, float]], window: int = DEFAULT_WINDOW) -> tuple[float | None, float | None]:
    """(samples/s, seconds spanned) over the last `window` (time_ms, samples/s) points.

    Each point's rate covers the interval since the previous point, so the
    window's rate is sum(rate x interval) / sum(interval) -- the same ratio of
    sums as SpeedMonitor. A single point is its own rate.
    """
    if not points:
        return None, None
    if len(points) == 1:
        return points[-1][1], None
    tail = points[-(window + 1):] if window > 0 else points
    done = 0.0
    span = 0.0
    for (t0, _), (t1, rate) in zip(tail, tail[1:], strict=False):
        dt = (t1 - t0) / 1000.0
        if dt > 0:
            done += rate * dt
            span += dt
    if span <= 0:
        return points[-1][1], None
    return done / span, span


def world_of(view: RunView, world_size: int | None) -> int:
    return max(int(world_size or view.world_size or 1), 1)


def samples_rate(view: RunView, rate: float | None) -> float | None:
    """A rate in the run's `count_unit` as samples/s: a tokens/s rate divided by the logged
    `max_sequence_length` (a GPT-3 sample is a sequence), None when the log gives no length."""
    if rate is None or view.count_unit != "tokens":
        return rate
    seq = view.params.get("max_sequence_length")
    seq_len = float(seq) if isinstance(seq, int | float) and not isinstance(seq, bool) and seq > 0 else None
    return rate / seq_len if seq_len else None


def rolling_throughput(
    view: RunView,
    window: int = DEFAULT_WINDOW,
    *,
    world_size: int | None = None,
    flops_per_sample: float | None = None,
    tokens_per_sample: float | None = None,
) -> Throughput:
    """The run's throughput over its last `window` throughput observations.

    The observations are in the run's `count_unit`: tokens/s for GPT-3 (samples/s from the logged
    `max_sequence_length`), samples/s otherwise.
    `flops_per_sample`/`tokens_per_sample`/`world_size` override what the log says (campaign values).
    """
    pts = view.throughput
    rate, span = window_rate(pts, window)
    gbs = view.global_batch_size
    tokens = tokens_per_sample or view.tokens_per_sample
    if view.count_unit == "tokens":  # the log counts tokens: samples are sequences of the logged length
        sps = samples_rate(view, rate)
        tp = _derived(sps, sps / gbs if sps is not None and gbs else None, points=min(len(pts), window),
                      seconds=span, world_size=world_of(view, world_size), full=len(pts) > window,
                      flops_per_sample=flops_per_sample or view.flops_per_sample, tokens_per_sample=None)
        return msgspec.structs.replace(tp, tokens_per_s=rate, unit="tokens")
    sps = rate
    tp = _derived(
        sps,
        sps / gbs if sps is not None and gbs else None,
        points=min(len(pts), window),
        seconds=span,
        world_size=world_of(view, world_size),
        full=len(pts) > window,
        flops_per_sample=flops_per_sample or view.flops_per_sample,
        tokens_per_sample=tokens,
    )
    if tp.tokens_per_s is None and not tokens:
        logged = view.tracked.get("tokens_per_s")  # the workload's own figure, when it logs one
        if isinstance(logged, int | float) and not isinstance(logged, bool) and math.isfinite(logged):
            return Throughput(tp.points, tp.seconds, tp.samples_per_s, tp.batches_per_s, float(logged),
                              tp.flops_per_s, tp.world_size, tp.full)
    return tp


# ---- Mila-style statistics --------------------------------------------------------------
class ItemStats(msgspec.Struct, frozen=True):
    """train_item statistics in items/s after dropping `discarded` warm-up observations."""

    count: int
    discarded: int
    avg: float | None
    min: float | None
    max: float | None
    sd: float | None  # sample standard deviation (n - 1); 0 for one observation
    range: float | None
    unit: str = "items/sec"


def warmup_stats(values: Sequence[float], discard: int = DEFAULT_DISCARD) -> ItemStats:
    """Statistics of `values` without the first `discard` (all None when nothing is left)."""
    finite = [float(v) for v in values if math.isfinite(v)]
    kept = finite[max(discard, 0):]
    dropped = len(finite) - len(kept)
    if not kept:
        return ItemStats(0, dropped, None, None, None, None, None)
    n = len(kept)
    avg = math.fsum(kept) / n
    sd = math.sqrt(math.fsum((v - avg) ** 2 for v in kept) / (n - 1)) if n > 1 else 0.0
    lo, hi = min(kept), max(kept)
    return ItemStats(n, dropped, avg, lo, hi, sd, hi - lo)


def train_item_stats(view: RunView, discard: int = DEFAULT_DISCARD) -> ItemStats:
    """Mila's train_item over the run's throughput observations (in the run's `count_unit` per second).

    For very long runs the oldest stored points are averaged pairs (bounded
    series), so "the first `discard`" then covers more than `discard` records.
    """
    stats = warmup_stats([rate for _, rate in view.throughput], discard)
    return stats if view.count_unit == "samples" else msgspec.structs.replace(stats, unit=f"{view.count_unit}/sec")
