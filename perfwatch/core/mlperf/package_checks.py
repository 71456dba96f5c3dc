"""MLPerf's own verdicts on a packaged folder: compliance per result file, system JSON, package checker.

We call the checkers' functions in-process (not their `main`, which configures
logging for the whole process and returns nothing): `check_system_desc` for the
system JSON and `package_checker.check_systems` + `check_training_result_files`
for the folder, capturing what they log. The package checker only knows MLPerf
benchmarks; for others (perfwatch's own workloads) it is "not applicable" and
we say so rather than print its vacuous pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perfwatch.core.mlperf.checker import captured_logs, is_official


@dataclass(frozen=True, slots=True)
class Verdict:
    """One checker's answer: passed None means it did not apply (reason in `lines`)."""

    name: str
    passed: bool | None
    lines: tuple[str, ...]
    command: str  # how to run the same check stand-alone

    def problems(self) -> tuple[str, ...]:
        return tuple(ln for ln in self.lines if ln.startswith(("ERROR", "WARNING", "not applicable", "not run", "crashed")))


def check_system_json(path: Path, ruleset: str) -> Verdict:
    from mlperf_logging.system_desc_checker import system_desc_checker as sdc

    cmd = f"python -m mlperf_logging.system_desc_checker {path} training {ruleset}"
    with captured_logs() as lines:
        try:
            valid, _, _, _ = sdc.check_system_desc(str(path), "training", ruleset)
        except Exception as exc:
            return Verdict("system_desc_checker", False, (*lines, f"crashed: {type(exc).__name__}: {exc}"), cmd)
    return Verdict("system_desc_checker", bool(valid), tuple(lines), cmd)


def check_package(out: Path, ruleset: str, benchmarks: set[str]) -> Verdict:
    """MLPerf's package checker on `out` (results + systems), where every benchmark is an MLPerf one."""
    cmd = f"python -m mlperf_logging.package_checker {out} training {ruleset}"
    foreign = sorted(b for b in benchmarks if not is_official(b, ruleset))
    if foreign:
        why = (f"not applicable: {', '.join(foreign)} is not an MLPerf benchmark in ruleset {ruleset} "
               "(the package checker skips such folders)")
        return Verdict("package_checker", None, (why,), cmd)
    from mlperf_logging.compliance_checker import mlp_compliance
    from mlperf_logging.package_checker import package_checker as pc

    with captured_logs() as lines:
        try:
            systems_ok = pc.check_systems(str(out), "training", ruleset)
            results_ok = pc.check_training_result_files(str(out), "training", ruleset, False, False, False, False,
                                                        False)
        except Exception as exc:
            return Verdict("package_checker", False, (*lines, f"crashed: {type(exc).__name__}: {exc}"), cmd)
        finally:
            del mlp_compliance.enqueued_configs[:]
    return Verdict("package_checker", bool(systems_ok and results_ok), tuple(lines), cmd)
