"""The run model: mllog events in, the state of one training run out.

`Run.apply(events)` is called on one thread only (the app's thread, or a
headless loop); consumers never read a `Run` directly but take `Run.view()`, an
immutable `RunView` snapshot that is cheap to build and safe to hand to widgets.

Facts encoded here (from MLPerf's rules and real result logs):
- dispatch on `key`, never on `event_type` (Composer logs run_start as POINT_IN_TIME);
- time-to-train = `run_stop.time_ms - run_start.time_ms`, the last run_start before the
  first run_stop, exactly as MLPerf's result summarizer pairs them;
- some logs (MLPerf's BERT reference, Composer) put *sample counts* in `epoch_num`;
- throughput comes from `tracked_stats` (`throughput`, samples/s) when present, else it
  is derived from sample counts between block/eval records.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import msgspec

from perfwatch.core import keys
from perfwatch.core.ingest.mllog import Bytes, Event, LineParser
from perfwatch.core.ingest.sanitize import NUMBER_LIMIT, finite
from perfwatch.core.mlperf.live_checks import Finding, LiveChecker
from perfwatch.core.mlperf.rulesets import StandsFor, choose, is_dated, log_date_ms, mlperf_benchmarks
from perfwatch.core.mlperf.targets import Target, official_target
from perfwatch.core.model.progress import ProgressCounter
from perfwatch.core.model.series import Series
from perfwatch.core.model.view import EvalPoint, RunView

__all__ = ["EvalPoint", "Run", "RunView"]

_SLICE = 1024
PHASES = ("waiting", "init", "running", "eval", "stopped")
_SKIP_PARAMS = frozenset(
    {
        "tracked_stats", "eval_accuracy", "block_start", "block_stop", "epoch_start", "epoch_stop",
        "eval_start", "eval_stop", "init_start", "init_stop", "run_start", "run_stop", "cache_clear",
    }
)


def _num(value: Any) -> float | None:
    """A number within +-NUMBER_LIMIT as float (core/ingest/sanitize.py `finite`); None for anything else:
    NaN, infinities, 1.7e308, bools. Called for most records: a float takes the inline fast path."""
    if type(value) is float:
        return value if -NUMBER_LIMIT <= value <= NUMBER_LIMIT else None  # NaN fails both comparisons
    return finite(value)


class Run(msgspec.Struct):
    """Mutable run state; feed it with `apply` (or `feed_lines`) on one thread."""

    run_id: str
    path: str = ""
    target: Target | None = None  # from the campaign; otherwise the official rule for the benchmark
    ruleset: str | None = None
    parser: LineParser = msgspec.field(default_factory=LineParser)
    ruleset_why: str = ""  # why `ruleset` (set by the RunBook: the option or the path)
    stands_for: StandsFor | None = None  # the campaign's `mlperf:` for this run's job

    benchmark: str | None = None
    org: str | None = None
    platform: str | None = None
    division: str | None = None
    submission_status: str | None = None
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    phase: str = "waiting"
    run_status: str | None = None
    first_time_ms: float | None = None
    dated_ms: float | None = None  # the first record time that dates the log (`rulesets.is_dated`)
    last_time_ms: float | None = None
    init_start_ms: float | None = None
    init_stop_ms: float | None = None
    run_start_ms: float | None = None
    run_stop_ms: float | None = None
    epoch: float | None = None
    samples: float | None = None
    evals: list[EvalPoint] = msgspec.field(default_factory=list)
    best_eval: float | None = None
    target_reached_ms: float | None = None
    throughput: Series = msgspec.field(default_factory=Series)
    throughput_source: str | None = None
    # the time-weighted average: sum of rate x time covered, and that time, in seconds
    _tp_area: float = 0.0
    _tp_secs: float = 0.0
    _tp_last_ms: float | None = None  # time of the latest throughput point
    tracked: dict[str, Any] = msgspec.field(default_factory=dict)
    key_counts: dict[str, int] = msgspec.field(default_factory=dict)
    version: int = 0
    _target_resolved: bool = False
    counter: ProgressCounter = msgspec.field(default_factory=ProgressCounter)
    _resolved: Target | None = None
    _view: RunView | None = None
    checker: LiveChecker | None = None
    _checker_version: int = -1
    _params_view: Mapping[str, Any] | None = None  # read-only copy, rebuilt only when params change

    def __post_init__(self) -> None:
        if self.checker is None:
            self.checker = LiveChecker(self.ruleset)

    # ---- ingest ---------------------------------------------------------------
    def feed_lines(self, lines: list[bytes]) -> int:
        """Parse complete raw lines and apply them; returns the number of records.

        Large batches go through in slices of `_SLICE` lines: parsed events are freed
        before the next slice, so the allocator reuses hot memory (about 2x faster on
        million-line files than parsing the whole batch first).
        """
        n = 0
        feed = self.parser.feed
        for k in range(0, len(lines), _SLICE):
            events = feed(lines[k : k + _SLICE] if len(lines) > _SLICE else lines)
            n += len(events)
            self.apply(events)
        return self._fed(n, bool(lines))

    def feed_block(self, data: Bytes, *, last: bool = False) -> int:
        """`feed_lines` for complete lines as one buffer (a file read from disk); returns the records.
        `last`: nothing follows (`LineParser.feed_block`)."""
        events = self.parser.feed_block(data, last=last)
        self.apply(events)
        return self._fed(len(events), bool(data))

    def _fed(self, n: int, had_lines: bool) -> int:
        if self.checker is not None:
            self.checker.note_bad_lines(self.parser.bad_count)
        if not n and had_lines:
            self.version += 1  # noise/bad lines change counters shown to the user
            self._view = None
        return n

    def apply(self, events: Iterable[Event]) -> None:
        counts = self.key_counts
        params = self.params
        handlers = _HANDLERS
        skip = _SKIP_PARAMS
        tracked: list[Event] = []  # the hot key: gathered, then handled in bulk
        push = tracked.append
        others: list[Event] = []  # for the compliance checker: no MLPerf rule names tracked_stats
        keep = others.append
        ev = None
        for ev in events:
            key = ev.key
            if key == "tracked_stats":
                push(ev)
                continue
            keep(ev)
            if tracked:
                self._on_tracked_bulk(tracked)
                tracked.clear()
            counts[key] = counts.get(key, 0) + 1
            if self.first_time_ms is None:
                self.first_time_ms = ev.time_ms
            if self.dated_ms is None and is_dated(ev.time_ms):
                self.dated_ms = ev.time_ms
            handler = handlers.get(key)
            if handler is not None:
                handler(self, ev)
            elif key not in skip:
                value = ev.value
                if value is None or isinstance(value, str | int | float | bool) or (
                        isinstance(value, list) and all(isinstance(x, str | int | float) for x in value)):
                    params[key] = value  # scalars, or a flat list such as the per-rank device names
                    self._params_view = None
                md = ev.md
                if md and "samples_count" in md:  # train_loss and the like: a count at a known time
                    self._progress(ev)
        if tracked:
            if self.first_time_ms is None:
                self.first_time_ms = tracked[0].time_ms
            if self.dated_ms is None:
                self.dated_ms = log_date_ms(ev.time_ms for ev in tracked)
            self._on_tracked_bulk(tracked)
        if others and self.checker is not None:
            self.checker.apply(others)
        if ev is not None:
            self.last_time_ms = ev.time_ms
            self.version += 1
            self._view = None

    # ---- handlers -------------------------------------------------------------
    def _on_submission(self, ev: Event) -> None:
        value = ev.value if isinstance(ev.value, str) else None
        key = ev.key
        if key == "submission_benchmark":
            self.benchmark = value
            self.counter.benchmark = value
            self._forget_official_target()
        elif key == "submission_org":
            self.org = value
        elif key == "submission_platform":
            self.platform = value
        elif key == "submission_division":
            self.division = value
            self._forget_official_target()
        elif key == "submission_status":
            self.submission_status = value

    def _forget_official_target(self) -> None:
        if self._resolved is None or self._resolved.source != "workload log":
            self._target_resolved = False

    def _on_init_start(self, ev: Event) -> None:
        if self.init_start_ms is None:
            self.init_start_ms = ev.time_ms
        if self.phase == "waiting":
            self.phase = "init"

    def _on_init_stop(self, ev: Event) -> None:
        self.init_stop_ms = ev.time_ms

    def _on_run_start(self, ev: Event) -> None:
        if self.run_stop_ms is None:  # MLPerf pairs the last run_start before the first run_stop
            self.run_start_ms = ev.time_ms
            self.phase = "running"
            self.counter.start(ev.time_ms)

    def _on_run_stop(self, ev: Event) -> None:
        if self.run_stop_ms is not None:
            return
        self.run_stop_ms = ev.time_ms
        status = ev.meta("status")
        self.run_status = status if isinstance(status, str) else "unknown"
        self.phase = "stopped"
        self._progress(ev)

    def _progress(self, ev: Event) -> None:
        """Epoch and trained count from the record's counters (rules: model/progress.py)."""
        md = ev.md
        if not md:
            return
        counter = self.counter
        for name in ("epoch_num", "first_epoch_num"):
            ep = _num(md.get(name))
            if ep is not None:
                if not counter.epoch_is_count(ep, self.params):
                    self.epoch = ep
                break
        trained, seconds = counter.trained, counter.seconds
        rate = counter.observe(ev.key, ev.time_ms, md, self.params)
        self.samples = counter.count
        if rate is not None and self.throughput_source != "tracked_stats":
            self.throughput_source = "derived"
            self.throughput.append(ev.time_ms, rate)
            self._tp_area += counter.trained - trained  # the count gained over the interval's time
            self._tp_secs += counter.seconds - seconds
            self._tp_last_ms = ev.time_ms

    def _on_block(self, ev: Event) -> None:
        self._progress(ev)
        if (
            ev.key in ("block_start", "epoch_start")
            and self.phase in ("eval", "init", "waiting")
            and self.run_start_ms is not None
            and self.run_stop_ms is None
        ):
            self.phase = "running"

    def _on_eval_start(self, ev: Event) -> None:
        self._progress(ev)
        if self.run_stop_ms is None and self.run_start_ms is not None:
            self.phase = "eval"

    def _on_eval_stop(self, ev: Event) -> None:
        self._progress(ev)
        if self.run_stop_ms is None and self.run_start_ms is not None:
            self.phase = "running"

    def _on_eval_accuracy(self, ev: Event) -> None:
        self._progress(ev)
        value = _num(ev.value)
        if value is None:
            return
        point = EvalPoint(ev.time_ms, value, self.epoch, self.samples)
        evals = self.evals
        evals.append(point)
        if len(evals) > 2048:  # keep the first, thin the middle, keep the recent
            del evals[1:1024:2]
        target = self.resolved_target()
        better_high = target.higher_is_better if target else True
        if self.best_eval is None or (value > self.best_eval if better_high else value < self.best_eval):
            self.best_eval = value
        if target is not None and self.target_reached_ms is None and target.reached(value):
            self.target_reached_ms = ev.time_ms

    def _on_target(self, ev: Event) -> None:
        value = _num(ev.value)
        if value is None or self.target is not None:  # the campaign's target wins
            return
        hib = ev.meta("higher_is_better", True)
        self._resolved = Target("eval_accuracy", value, bool(hib), source="workload log")
        self._target_resolved = True
        self._recheck_target()

    def _recheck_target(self) -> None:
        target = self._resolved
        if target is None or self.target_reached_ms is not None:
            return
        for point in self.evals:
            if target.reached(point.value):
                self.target_reached_ms = point.time_ms
                break

    def _on_tracked_bulk(self, events: list[Event]) -> None:
        """tracked_stats records of one batch, in order (most lines of a long log are these)."""
        self.key_counts["tracked_stats"] = self.key_counts.get("tracked_stats", 0) + len(events)
        counter = self.counter
        try:  # fast path: every record carries a numeric throughput
            ys = [ev.value["throughput"] for ev in events]
            total = math.fsum(ys)  # raises TypeError unless every value is a number
            lo, hi = min(ys), max(ys)
            if not (math.isfinite(total) and lo >= -NUMBER_LIMIT and hi <= NUMBER_LIMIT):
                raise ValueError("a value out of range")  # NaN, inf, 1e308: the slow path leaves them out
            xs: Sequence[float] = _Times(events)
            checked = not counter.logged_throughput_is_total or counter.plausible_logged(ys, lo, hi)
        except (TypeError, KeyError, ValueError, OverflowError):
            kept_x: list[float] = []
            ys = []
            for ev in events:
                value = ev.value
                if type(value) is dict:
                    tp = _num(value.get("throughput"))
                    if tp is not None:
                        kept_x.append(ev.time_ms)
                        ys.append(tp)
            xs, checked = kept_x, False
        if ys and counter.logged_throughput_is_total:
            if not checked:  # some value may be a jump of orders of magnitude: judged one by one
                xs, ys = counter.keep_plausible_logged(xs, ys)
            self.throughput_source = "tracked_stats"
            if ys:
                self.throughput.extend(xs, ys)
                self._weigh(xs[0:len(ys)], ys)
        for i in range(len(events) - 1, -1, -1):
            ev = events[i]
            if type(ev.value) is dict:
                self.tracked = ev.value
                md = ev.md
                if md and ("samples_count" in md or "epoch_num" in md):
                    # counters on these records: read every one in order, as one at a time would
                    for earlier in events[:i]:
                        if type(earlier.value) is dict:
                            self._progress(earlier)
                self._progress(ev)
                break

    def _weigh(self, times: Sequence[float], rates: list[float]) -> None:
        """Add logged rates to the average, each over the time since the previous rate (or run_start)."""
        prev = self._tp_last_ms if self._tp_last_ms is not None else self.run_start_ms
        area = secs = 0.0
        for t, y in zip(times, rates, strict=True):
            if prev is not None and t > prev:
                gap = (t - prev) / 1000.0
                area += y * gap
                secs += gap
            if prev is None or t > prev:
                prev = t
        self._tp_area += area
        self._tp_secs += secs
        self._tp_last_ms = prev

    # ---- views ----------------------------------------------------------------
    def resolved_target(self) -> Target | None:
        if self.target is not None:
            return self.target
        stand_in = self.stand_in()
        if not self._target_resolved and stand_in is not None:
            official = official_target(stand_in.benchmark, stand_in.ruleset, stand_in.division)
            self._resolved = official if official is None else msgspec.structs.replace(
                official, source=f"{official.source} (the campaign's mlperf: {stand_in.benchmark})")
            self._target_resolved = True
            self._recheck_target()
        elif not self._target_resolved and self.benchmark:
            ruleset, _ = self.ruleset_choice()
            self._resolved = official_target(self.benchmark, ruleset, self.division or "closed")
            self._target_resolved = True
            self._recheck_target()
        return self._resolved if self._target_resolved else None

    def stand_in(self) -> StandsFor | None:
        """The campaign's `mlperf:` for this run, unless its log names an MLPerf benchmark itself (then the
        log is judged as it says, as MLPerf's own checkers would)."""
        if self.stands_for is None or (self.benchmark and self.benchmark in mlperf_benchmarks()):
            return None
        return self.stands_for

    def ruleset_choice(self) -> tuple[str | None, str]:
        """The ruleset judging this run and why: given, else inferred from the log as the checker does."""
        if self.ruleset:
            return self.ruleset, self.ruleset_why or f"ruleset {self.ruleset}"
        if not self.benchmark:
            return None, "not known yet: the log has not named its benchmark"
        chosen = choose(None, None, self.benchmark, self.dated_ms)
        return chosen.ruleset, chosen.why

    def _frozen_params(self) -> Mapping[str, Any]:
        if self._params_view is None:
            self._params_view = MappingProxyType(dict(self.params))
        return self._params_view

    def finish(self) -> None:
        """The log is complete (its process ended, or a static file was read): judge end-of-run rules."""
        if self.checker is not None:
            self.checker.finish()

    def view(self) -> RunView:
        """The current snapshot; rebuilt only when something changed since the last call."""
        checker = self.checker
        if checker is not None and checker.version != self._checker_version:
            self._checker_version = checker.version
            self.version += 1
            self._view = None
        if self._view is not None:
            return self._view
        target = self.resolved_target()
        ruleset, ruleset_why = self.ruleset_choice()
        ttt = None
        if self.run_start_ms is not None and self.run_stop_ms is not None:
            ttt = self.run_stop_ms - self.run_start_ms
        p = self.params
        parser = self.parser
        stats = self.throughput.stats()
        self._view = RunView(
            run_id=self.run_id,
            path=self.path,
            benchmark=self.benchmark,
            org=self.org,
            platform=self.platform,
            division=self.division,
            submission_status=self.submission_status,
            seed=p.get("seed"),
            global_batch_size=_int(p.get("global_batch_size")),
            grad_accum_steps=_int(p.get("gradient_accumulation_steps")),
            params=self._frozen_params(),
            phase=self.phase,
            run_status=self.run_status,
            first_time_ms=self.first_time_ms,
            dated_ms=self.dated_ms,
            last_time_ms=self.last_time_ms,
            init_start_ms=self.init_start_ms,
            init_stop_ms=self.init_stop_ms,
            run_start_ms=self.run_start_ms,
            run_stop_ms=self.run_stop_ms,
            time_to_train_ms=ttt,
            epoch=self.epoch,
            samples=self.samples,
            train_samples=_num(p.get("train_samples")),
            target=target,
            evals=tuple(self.evals),
            last_eval=self.evals[-1].value if self.evals else None,
            best_eval=self.best_eval,
            target_reached=self.target_reached_ms is not None,
            target_reached_ms=self.target_reached_ms,
            throughput=self.throughput.points(),
            throughput_stats=stats,
            throughput_avg=(self._tp_area / self._tp_secs if self._tp_secs > 0
                            else stats.mean if stats.count else None),
            throughput_source=self.throughput_source,
            count_unit=self.counter.unit,
            tracked=MappingProxyType(self.tracked),  # replaced, never mutated: no copy needed
            flops_per_sample=_num(p.get(keys.FLOPS_PER_SAMPLE)),
            tokens_per_sample=_num(p.get(keys.TOKENS_PER_SAMPLE)),
            precision=p.get(keys.PRECISION) if isinstance(p.get(keys.PRECISION), str) else None,
            world_size=_int(p.get(keys.WORLD_SIZE)),
            records=parser.records,
            bad_count=parser.bad_count,
            bad_lines=tuple(parser.bad),
            non_utf8=parser.non_utf8,
            key_counts=MappingProxyType(dict(self.key_counts)),
            findings=(*(checker.findings() if checker is not None else ()), *_time_findings(ttt),
                      *_counter_findings(self.counter)),
            compliance_ok=checker.passed if checker is not None else None,
            version=self.version,
            ruleset=ruleset,
            ruleset_why=ruleset_why,
            stands_for=self.stand_in(),
        )
        return self._view

    def reset(self) -> None:
        """The log was truncated or replaced: forget everything learned from it."""
        fresh = Run(self.run_id, self.path, self.target, self.ruleset, ruleset_why=self.ruleset_why,
                    stands_for=self.stands_for)
        for name in Run.__struct_fields__:
            if name not in ("version", "_checker_version"):
                setattr(self, name, getattr(fresh, name))
        self.version += 1
        self._view = None


class _Times(Sequence[float]):
    """`time_ms` of a list of events, read only where asked (Series.extend keeps few of them)."""

    __slots__ = ("_events",)

    def __init__(self, events: list[Event]) -> None:
        self._events = events

    def __len__(self) -> int:
        return len(self._events)

    def __getitem__(self, i):  # noqa: ANN001 - int or slice, like list
        if isinstance(i, slice):
            return [ev.time_ms for ev in self._events[i]]
        return self._events[i].time_ms


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


_HANDLERS = {
    "submission_benchmark": Run._on_submission,
    "submission_org": Run._on_submission,
    "submission_platform": Run._on_submission,
    "submission_division": Run._on_submission,
    "submission_status": Run._on_submission,
    "init_start": Run._on_init_start,
    "init_stop": Run._on_init_stop,
    "run_start": Run._on_run_start,
    "run_stop": Run._on_run_stop,
    "block_start": Run._on_block,
    "block_stop": Run._on_block,
    "epoch_start": Run._on_block,
    "epoch_stop": Run._on_block,
    "eval_start": Run._on_eval_start,
    "eval_stop": Run._on_eval_stop,
    "eval_accuracy": Run._on_eval_accuracy,
    keys.TARGET: Run._on_target,
}


def _time_findings(ttt: float | None) -> tuple[Finding, ...]:
    """A negative time-to-train (run_stop logged before run_start) still scores as MLPerf's summarizer
    computes it, but a reader must see that the clock went backwards."""
    if ttt is None or ttt >= 0:
        return ()
    return (Finding("warning", "time_to_train", f"negative time-to-train ({ttt / 1000:.3f} s): run_stop is "
                    "logged before run_start (clock or log order); scored as MLPerf's summarizer does"),)


def _counter_findings(counter: ProgressCounter) -> tuple[Finding, ...]:
    """Counters that disagree and rates set aside: said once each (the first few), never silently dropped."""
    return tuple(Finding("warning", "throughput", why, time_ms) for time_ms, why in counter.notes)
