"""Which MLPerf rules apply to a log: the ruleset and the checker's starting rule file.

Shared by the official checker on whole files (checker.py) and the live checks fed record by
record (live_checks.py), so both judge a log against the same rules. The ruleset is the one
asked for, else the version in the path, else the newest ruleset that knows the benchmark;
perfwatch's own workload names get the rules perfwatch.instrument ships for them.
"""

from __future__ import annotations

from pathlib import Path

from mlperf_logging.benchmark_meta import get_allowed_benchmarks

from perfwatch.core.mlperf.targets import latest_ruleset, ruleset_from_path, training_rulesets

__all__ = ["PERFWATCH_RULES_DIR", "USAGE", "config_for", "is_official", "perfwatch_rules", "ruleset_for"]

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


def ruleset_for(path: Path, benchmark: str | None, requested: str | None = None) -> str:
    """The option, else the version in the path, else the latest ruleset that knows the benchmark."""
    if requested:
        return requested
    detected = ruleset_from_path(path)
    if detected:
        return detected
    for rs in reversed(training_rulesets()):
        if is_official(benchmark, rs):
            return rs
    return latest_ruleset()


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
