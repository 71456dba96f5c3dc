"""How far a run has trained, in the unit its benchmark counts, and the rate derived from it.

What a log's counters mean differs by benchmark and by submitter, so only counters whose time and
count belong together are read (checked on MLPerf Training v4.0, v4.1 and v5.0 results of every
benchmark and submitter):

- `samples_count` or `epoch_num` on a record that is not a block or epoch boundary (`eval_start`,
  `eval_accuracy`, `eval_stop`, `run_stop`, `train_loss`, `tracked_stats` ...): the count trained when
  the record was written. This is the counter MLPerf's RCP checker reads from `eval_accuracy`.
- Block and epoch boundaries are not read: their counters mean different things in different
  submissions (Google's GPT-3 `block_stop` carries the block's *first* count; Intel's llama2_70b_lora
  `block_start` carries a step number in `samples_count`; Lenovo's and Oracle's `block_stop` the
  block's first count; MLPerf's ResNet numbers epochs from 1, SSD from 0).
- Records written during an eval (after `eval_start`, before `eval_stop` or the next block or epoch)
  other than the eval records themselves count the eval, not training (NVIDIA's v5.1 llama31_8b logs a
  `tracked_stats` per eval step with `samples_count` 16, 32, ...): their counters are not read.
- A count below the highest one seen is not progress: that record is skipped (NVIDIA's v5.1 flux1
  and llama logs end each block with a `tracked_stats` whose `samples_count` is the block's size
  between ones that count every sample trained). A key whose counters are never progress and fall
  more than one global batch below the count (a counter in another unit: tinycorp's BERT
  `eval_stop` carries its eval samples) is named once in the run's findings; one a step behind
  (AMD's llama31_8b `eval_accuracy`, one batch below its `eval_start`) is the same unit, not a
  finding.

The unit: GPT-3 counts tokens (`epoch_num`, `train_samples` and the workload's own `throughput`
are tokens; an eval every 50,331,648 tokens), every other MLPerf benchmark samples. `epoch_num` is
a sample count for BERT and GPT-3, an epoch number (times `train_samples` for samples) for ResNet,
SSD/RetinaNet, DLRM, GNN/R-GAT, and, for benchmarks this table does not know, a count when it is a
multiple of the global batch size of at least 1000 (Composer's logs, MLPerf's UNet3D). Two
benchmarks differ: Stable Diffusion evaluates its checkpoints after training (its blocks are read,
its evals not), and SSD/RetinaNet log `train_samples` in batches (times the global batch size) and a
`throughput` that is per device for some submitters (the counters' rate is used instead).

The rate over an interval runs from the last record that still shows the old count to the first
that shows the new one (so an eval between two counts is not training time); the first interval
starts at `run_start` with nothing trained. A rate two orders of magnitude away from the recent
ones is set aside, not shown, until three in a row agree on the new level. The run's average is
the count over the time of the intervals shown (`trained` / `seconds`), not the mean of their
rates: a slow first epoch (University of Florida's v5.1 RetinaNet: 2,283 s at 512 images/s, then
~300 s epochs at ~3,900) weighs by its time, as the run's samples over its training time do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

SAMPLES = "samples"
TOKENS = "tokens"
TOKEN_BENCHMARKS = frozenset({"gpt3"})
EPOCH_IS_COUNT_BENCHMARKS = frozenset({"bert", "gpt3"})
EPOCH_IS_EPOCH_BENCHMARKS = frozenset(
    {"resnet", "ssd", "retinanet", "dlrm_dcnv2", "dlrm", "gnn", "rgat", "maskrcnn", "rnnt", "minigo"})
BOUNDARY_KEYS = frozenset({"block_start", "block_stop", "epoch_start", "epoch_stop"})
EVAL_KEYS = frozenset({"eval_start", "eval_accuracy", "eval_stop"})
# Stable Diffusion evaluates saved checkpoints after training: its eval records are written long after
# the count they name was trained, so its blocks (`samples_count` on block_start/block_stop) are read
BLOCKS_COUNT_BENCHMARKS = frozenset({"stable_diffusion"})
# SSD/RetinaNet log `train_samples` as batches per epoch (4572 x 256 = 1,170,432: the 1,170,301 images of
# its OpenImages subset, the last batch short), and their logged `throughput` is per device for some
# submitters and total for others (4 x 296 images/s where the counters give 1,121): the counters decide
BATCHES_PER_EPOCH_BENCHMARKS = frozenset({"ssd", "retinanet"})
JUMP = 100.0  # a rate this many times above or below the recent median is set aside
RECENT = 8  # rates the median is taken over
AGREE = 3  # rates in a row at a new level that make it the level
NOTES = 5  # findings kept about counters and set-aside rates


def count_unit(benchmark: str | None) -> str:
    """What the benchmark's counters and throughput count: "tokens" for GPT-3, else "samples"."""
    return TOKENS if benchmark in TOKEN_BENCHMARKS else SAMPLES


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


class RateLevel:
    """The recent level of one series of rates: a rate JUMP times above or below the median of the last
    RECENT is set aside, until AGREE in a row at one new level (within 10x of each other) make it the
    level. Rates of zero or below are neither judged nor part of the level."""

    __slots__ = ("_agree", "_recent")

    def __init__(self) -> None:
        self._recent: list[float] = []
        self._agree: list[tuple[float, float]] = []  # set-aside (time_ms, rate) at one new level

    def set_aside(self, time_ms: float, rate: float) -> float | None:
        """None when `rate` is plausible (it joins the level), else the median it was judged against."""
        if rate <= 0:
            return None
        recent = self._recent
        if recent:
            mid = sorted(recent)[len(recent) // 2]
            if not (mid / JUMP <= rate <= mid * JUMP):
                level = self._agree
                if level and not (level[0][1] / 10 <= rate <= level[0][1] * 10):
                    level.clear()
                level.append((time_ms, rate))
                if len(level) < AGREE:
                    return mid
                recent.clear()  # three in a row agree: the new level is the rate
                recent.extend(r for _, r in level[:-1])
        self._agree.clear()
        recent.append(rate)
        del recent[:-RECENT]
        return None

    def all_within(self, lo: float, hi: float, rates: Sequence[float]) -> bool:
        """The batch `rates` (lying in [lo, hi]) joins the level at once when none of them is a jump: all
        above zero, within JUMP of each other and of the recent median; else False and nothing is taken
        (`set_aside` then judges them one by one)."""
        recent = self._recent
        if lo <= 0 or hi > lo * JUMP:
            return False
        if recent:
            mid = sorted(recent)[len(recent) // 2]
            if not (mid / JUMP <= lo and hi <= mid * JUMP):
                return False
        self._agree.clear()
        recent.extend(rates[-RECENT:])
        del recent[:-RECENT]
        return True


class ProgressCounter:
    """The run's trained count and derived rates; `observe` every record with counters, in order."""

    __slots__ = ("_epoch_is_count", "_in_eval", "_last", "_logged", "_progressed", "_rates", "_seen", "benchmark",
                 "count", "notes", "seconds", "set_aside", "trained", "untrusted")

    def __init__(self) -> None:
        self.benchmark: str | None = None
        self.count: float | None = None  # the highest trusted count, in `count_unit(benchmark)`
        self.untrusted: set[str] = set()  # keys named in the findings: counters in another unit
        self.trained = 0.0  # count gained over the intervals whose rates were shown
        self.seconds = 0.0  # and their time: the run's average rate is trained / seconds
        self.set_aside = 0  # implausible rates (derived or logged) not shown
        self.notes: list[tuple[float, str]] = []  # (time_ms, why) for the run's findings
        self._epoch_is_count: bool | None = None
        self._last: tuple[float, float] | None = None  # (time_ms last showing `count`, count)
        self._rates = RateLevel()  # the rates derived from the counters
        self._logged = RateLevel()  # the throughputs the workload logs (tracked_stats)
        self._seen = False
        self._in_eval = False  # between eval_start and eval_stop (or the next block/epoch)
        self._progressed: set[str] = set()  # keys whose counter has shown progress

    @property
    def unit(self) -> str:
        return count_unit(self.benchmark)

    def start(self, time_ms: float) -> None:
        """run_start: nothing trained yet."""
        if self._last is None:
            self._last = (time_ms, 0.0)

    def epoch_is_count(self, epoch: float, params: Mapping[str, Any]) -> bool:
        """Whether this log's `epoch_num` is a sample (token) count rather than an epoch number."""
        if self._epoch_is_count is None:
            if self.benchmark in EPOCH_IS_COUNT_BENCHMARKS:
                self._epoch_is_count = True
            elif self.benchmark in EPOCH_IS_EPOCH_BENCHMARKS:
                self._epoch_is_count = False
            elif epoch >= 1000:
                gbs = _finite(params.get("global_batch_size"))
                self._epoch_is_count = bool(gbs and epoch % gbs == 0)
            else:
                return False
        return self._epoch_is_count

    @property
    def logged_throughput_is_total(self) -> bool:
        """Whether the workload's own `throughput` (tracked_stats) is the run's total rate in its unit."""
        return self.benchmark not in BATCHES_PER_EPOCH_BENCHMARKS

    def counted(self, key: str, md: Mapping[str, Any], params: Mapping[str, Any]) -> float | None:
        """The count trained when this record was written, in the run's unit (None: it says none)."""
        if self.benchmark in BLOCKS_COUNT_BENCHMARKS:
            if key in EVAL_KEYS:
                return None
        elif key in BOUNDARY_KEYS:
            return None
        sc = _finite(md.get("samples_count"))
        if sc is not None:
            return sc
        ep = _finite(md.get("epoch_num"))
        if ep is None:
            return None
        if self.epoch_is_count(ep, params):
            return ep
        per_epoch = _finite(params.get("train_samples"))
        if per_epoch and self.benchmark in BATCHES_PER_EPOCH_BENCHMARKS:
            gbs = _finite(params.get("global_batch_size"))
            per_epoch = per_epoch * gbs if gbs else None
        return ep * per_epoch if per_epoch else None

    def observe(self, key: str, time_ms: float, md: Mapping[str, Any] | None,
                params: Mapping[str, Any]) -> float | None:
        """Read one record's counter; returns the rate (unit/s) of the interval it closes, if any."""
        in_eval = self._in_eval
        if key == "eval_start":
            self._in_eval = True
        elif key == "eval_stop" or key in BOUNDARY_KEYS:
            self._in_eval = False
        if not md or (in_eval and key not in EVAL_KEYS and key != "run_stop"):
            return None  # a record written during an eval counts the eval
        n = self.counted(key, md, params)
        if n is None:
            return None
        if self.count is not None and n < self.count:
            gbs = _finite(params.get("global_batch_size")) or 0.0
            if key not in self._progressed and key not in self.untrusted and n < self.count - gbs:
                self.untrusted.add(key)
                self._note(time_ms, f"the counter of {key} ({n:.6g}) is below the count already trained "
                                    f"({self.count:.6g}): {key} is not read as progress")
            return None
        self._progressed.add(key)
        last = self._last
        if self.count is None or n > self.count:
            self.count = n
        if last is None:  # no run_start yet: counts before it are not training
            return None
        if n == last[1]:
            if key != "block_stop":  # some block_stops repeat their block's first count: not its end
                self._last = (time_ms, n)
            return None
        self._last = (time_ms, n)
        dt = (time_ms - last[0]) / 1000.0
        if dt <= 0:
            return None
        rate = self._plausible(time_ms, (n - last[1]) / dt)
        if rate is not None:
            self.trained += n - last[1]
            self.seconds += dt
        return rate

    def _plausible(self, time_ms: float, rate: float) -> float | None:
        mid = self._rates.set_aside(time_ms, rate)
        if mid is None:
            return rate
        self.set_aside += 1
        self._note(time_ms, f"a rate of {rate:.4g} {self.unit}/s, {rate / mid:.3g}x the recent "
                            f"{mid:.4g}, was set aside as implausible")
        return None

    def plausible_logged(self, rates: Sequence[float], lo: float, hi: float) -> bool:
        """Whether every throughput of one batch of tracked_stats records (`lo`, `hi`: their min and max) is
        plausible against the recent logged ones; one comparison per batch while they are."""
        return self._logged.all_within(lo, hi, rates)

    def keep_plausible_logged(self, times: Sequence[float], rates: Sequence[float]) -> tuple[list[float], list[float]]:
        """The logged throughputs (and their times) that are not set aside as implausible, one by one, each
        one set aside said as a counter rate set aside is."""
        kept_t: list[float] = []
        kept: list[float] = []
        for t, rate in zip(times, rates, strict=True):
            mid = self._logged.set_aside(t, rate)
            if mid is None:
                kept_t.append(t)
                kept.append(rate)
                continue
            self.set_aside += 1
            self._note(t, f"a logged throughput of {rate:.4g} {self.unit}/s (tracked_stats), {rate / mid:.3g}x "
                          f"the recent {mid:.4g}, was set aside as implausible")
        return kept_t, kept

    def _note(self, time_ms: float, why: str) -> None:
        if len(self.notes) < NOTES:
            self.notes.append((time_ms, why))
