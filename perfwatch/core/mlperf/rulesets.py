"""Which MLPerf rules apply to a log: the ruleset and the checker's starting rule file.

Shared by the official checker on whole files (checker.py) and the live checks fed record by
record (live_checks.py), so both judge a log against the same rules. perfwatch's own workload names get the rules perfwatch.instrument ships for them.

The ruleset, in order: the `--ruleset` the user gave (refused when mlperf_logging does not know
it), else the version in the path (`training_results_v4.0/...`, `.../v2.1/...`; a folder named for the
round before a version inside another name), else inferred
from the log itself: the first MLPerf round whose results were published after the run's first
record and whose benchmark list names the log's `submission_benchmark` (a run is made for the
next publication, so a v4.0 `llama2_70b_lora` folder copied out of its tree is still judged by
4.0.0, not by the newest rules); else the newest ruleset that lists the benchmark; else the
newest ruleset. Every choice carries a sentence saying which rule chose it, for the outputs.
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Iterable
from pathlib import Path

import msgspec
from mlperf_logging.benchmark_meta import get_allowed_benchmarks

from perfwatch.core.mlperf.targets import latest_ruleset, ruleset_from_path, training_rulesets

__all__ = [
    "PERFWATCH_RULES_DIR", "USAGE", "RulesetChoice", "StandsFor", "UnknownBenchmark", "UnknownRuleset",
    "check_requested", "choose", "is_dated", "log_date_ms", "config_for", "is_official", "mlperf_benchmarks", "perfwatch_rules", "ruleset_for",
    "stands_for",
]

USAGE = "training"
# perfwatch's own workloads ship rules that apply MLPerf's common rules to their benchmark names
PERFWATCH_RULES_DIR = Path(__file__).resolve().parents[2] / "instrument" / "rules"


def is_official(benchmark: str | None, ruleset: str) -> bool:
    if not benchmark:
        return False
    try:
        return benchmark in get_allowed_benchmarks(USAGE, ruleset)
    except (KeyError, ValueError, IndexError):
        return False


def ruleset_for(path: Path | None, benchmark: str | None, requested: str | None = None,
                first_time_ms: float | None = None) -> str:
    """The option, else the version in the path, else inferred from the log (module docstring)."""
    return choose(requested, path, benchmark, first_time_ms).ruleset


def perfwatch_rules(ruleset: str, benchmark: str) -> Path | None:
    """perfwatch.instrument's rules file for its own workload names in `ruleset`, if shipped."""
    try:
        from perfwatch.instrument.compliance import WORKLOAD_BENCHMARKS, rules_path
    except ImportError:
        return None
    path = rules_path(ruleset)
    return path if benchmark in WORKLOAD_BENCHMARKS and path.is_file() else None


def config_for(ruleset: str, benchmark: str | None) -> str:
    """The official `training_X/common.yaml`, or perfwatch's rules for its own benchmark names.

    The checker joins the name to its own folder; an absolute path stays as it is.
    """
    if benchmark and not is_official(benchmark, ruleset):
        own = perfwatch_rules(ruleset, benchmark)
        if own is not None:
            return str(own)
    return f"{USAGE}_{ruleset}/common.yaml"


# When each MLPerf Training round's results were published (MLCommons press releases); a run
# logged before that day can belong to that round. Later rounds not listed: "newest that lists it".
ROUND_PUBLISHED: dict[str, _dt.date] = {
    "0.6.0": _dt.date(2019, 7, 10),
    "0.7.0": _dt.date(2020, 7, 29),
    "1.0.0": _dt.date(2021, 6, 30),
    "1.1.0": _dt.date(2021, 12, 1),
    "2.0.0": _dt.date(2022, 6, 29),
    "2.1.0": _dt.date(2022, 11, 9),
    "3.0.0": _dt.date(2023, 6, 27),
    "3.1.0": _dt.date(2023, 11, 8),
    "4.0.0": _dt.date(2024, 6, 12),
    "4.1.0": _dt.date(2024, 11, 13),
    "5.0.0": _dt.date(2025, 6, 4),
    "5.1.0": _dt.date(2025, 11, 12),
}


# before MLPerf Training's first round (v0.5, December 2018) a date says nothing: a synthetic log
# (time_ms counted from 0) must not be judged by 0.6.0's rules
FIRST_PLAUSIBLE = _dt.date(2018, 6, 1)
DATED_FROM_MS = _dt.datetime(2018, 6, 1, tzinfo=_dt.UTC).timestamp() * 1000.0


def is_dated(time_ms: float | None) -> bool:
    """A record time that can date a log: not a zero or placeholder time (a `cache_clear` at time_ms 0)."""
    return time_ms is not None and time_ms >= DATED_FROM_MS


def log_date_ms(times: Iterable[float]) -> float | None:
    """THE log's date for ruleset inference, for every command: its first record time that `is_dated`."""
    return next((t for t in times if is_dated(t)), None)


class RulesetChoice(msgspec.Struct, frozen=True):
    ruleset: str
    source: str  # "option", "path", "log date", "benchmark", "default"
    why: str  # one sentence for the outputs: the evidence, and the other rulesets that fit too
    also: tuple[str, ...] = ()  # other rulesets the evidence fits (a run resubmitted to a later round)


class UnknownRuleset(ValueError):
    """`--ruleset` names a version mlperf_logging has no rules for."""


def check_requested(requested: str | None) -> None:
    """Raise UnknownRuleset (with the known ones) for a `--ruleset` mlperf_logging does not ship."""
    if requested is not None and requested not in training_rulesets():
        raise UnknownRuleset(f"unknown ruleset {requested!r} (known: {', '.join(training_rulesets())})")


@functools.lru_cache(maxsize=256)
def rulesets_listing(benchmark: str | None) -> tuple[str, ...]:
    """The rulesets (oldest first) whose benchmark list names `benchmark`. Cached: every live view of a
    run asks (its ruleset), and mlperf_logging builds each list anew (a sixth of the live engine's time)."""
    if not benchmark:
        return ()
    return tuple(rs for rs in training_rulesets() if is_official(benchmark, rs))


def by_date(benchmark: str, first_time_ms: float) -> RulesetChoice | None:
    """The first round published after the run's date that lists `benchmark`."""
    try:
        day = _dt.datetime.fromtimestamp(first_time_ms / 1000.0, tz=_dt.UTC).date()
    except (OverflowError, OSError, ValueError):
        return None
    if day < FIRST_PLAUSIBLE:
        return None
    listing = rulesets_listing(benchmark)
    for i, rs in enumerate(listing):
        published = ROUND_PUBLISHED.get(rs)
        if published is not None and day < published:
            later = listing[i + 1:]
            why = (f"inferred from the log: run dated {day.isoformat()}, before MLPerf Training v{_short(rs)}'s "
                   f"results ({published.isoformat()}), a round that lists {benchmark}")
            if later:
                why += (f"; {', '.join('v' + _short(r) for r in later)} list {benchmark} too (a run resubmitted to "
                        "a later round): the round in the path or --ruleset settles it")
            return RulesetChoice(rs, "log date", why, later)
    return None


def choose(requested: str | None = None, path: str | Path | None = None, benchmark: str | None = None,
           first_time_ms: float | None = None) -> RulesetChoice:
    """The ruleset for one log (see module docstring). `requested` must have passed `check_requested`."""
    if requested:
        return RulesetChoice(requested, "option", f"--ruleset {requested}")
    if path is not None:
        found = ruleset_from_path(path)
        if found:
            return RulesetChoice(found, "path", f"the version in the path (v{_short(found)})")
    if benchmark and is_dated(first_time_ms):
        assert first_time_ms is not None
        dated = by_date(benchmark, first_time_ms)
        if dated is not None:
            return dated
    listing = rulesets_listing(benchmark)
    if listing:
        rs = listing[-1]
        undated = "no dated record in the log" if not is_dated(first_time_ms) else \
            "the log's date matches no published round"
        return RulesetChoice(rs, "benchmark", f"the newest ruleset that lists {benchmark} (no version in the "
                             f"path, {undated}); {len(listing) - 1} older ones list it too", listing[:-1])
    rs = latest_ruleset()
    return RulesetChoice(rs, "default", "the newest ruleset mlperf_logging knows (no version in the path, "
                         "no MLPerf benchmark named in the log)")


def _short(ruleset: str) -> str:
    parts = ruleset.split(".")
    return ".".join(parts[:2]) if len(parts) == 3 and parts[2] == "0" else ruleset


# ---- a campaign's job standing in for an MLPerf benchmark (the job key `mlperf:`) ------------------
class StandsFor(msgspec.Struct, frozen=True):
    """The MLPerf Training benchmark, ruleset and division a campaign's job stands for."""

    benchmark: str
    ruleset: str
    division: str = "closed"

    def describe(self) -> str:
        return f"{self.benchmark} (MLPerf Training {_short(self.ruleset)}, {self.division})"


class UnknownBenchmark(ValueError):
    """A benchmark name mlperf_logging's benchmark lists do not hold (for the ruleset asked)."""


@functools.cache
def mlperf_benchmarks() -> tuple[str, ...]:
    """Every MLPerf Training benchmark some ruleset this mlperf_logging knows lists, sorted."""
    names: set[str] = set()
    for rs in training_rulesets():
        try:
            names.update(get_allowed_benchmarks(USAGE, rs))
        except (KeyError, ValueError, IndexError):
            continue
    return tuple(sorted(names))


def normal_ruleset(text: str) -> str:
    """`4.0.0`, `4.0`, `v4.0` -> "4.0.0" (the spelling mlperf_logging's folders use)."""
    parts = text.strip().removeprefix("v").removeprefix("V").split(".")
    return ".".join(parts + ["0"] * (3 - len(parts))) if 1 < len(parts) < 3 else ".".join(parts)


def stands_for(benchmark: str, ruleset: str | None = None, division: str = "closed") -> StandsFor:
    """Validated against mlperf_logging: `UnknownRuleset` for a ruleset it has no rules for,
    `UnknownBenchmark` for a name no ruleset lists, or that `ruleset` does not list. Without a
    ruleset: the newest one that lists the benchmark."""
    if ruleset is not None:
        ruleset = normal_ruleset(ruleset)
        check_requested(ruleset)
    known = mlperf_benchmarks()
    if benchmark not in known:
        import difflib

        close = difflib.get_close_matches(benchmark, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
        raise UnknownBenchmark(f"{benchmark!r} is not an MLPerf Training benchmark{hint}")
    listing = rulesets_listing(benchmark)
    if ruleset is None:
        ruleset = listing[-1]
    elif ruleset not in listing:
        raise UnknownBenchmark(f"{benchmark} is not a benchmark of MLPerf Training {ruleset} (rulesets that list "
                               f"it: {', '.join(listing)}; {ruleset} lists {', '.join(_listed(ruleset))})")
    return StandsFor(benchmark, ruleset, division)


def _listed(ruleset: str) -> list[str]:
    try:
        return list(dict.fromkeys(get_allowed_benchmarks(USAGE, ruleset)))
    except (KeyError, ValueError, IndexError):
        return []
