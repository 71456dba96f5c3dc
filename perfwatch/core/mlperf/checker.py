"""MLPerf's official compliance checker, run in-process on every run log under a folder.

We call `mlperf_logging.compliance_checker.mlp_compliance` exactly as its
`__main__` does (`make_checker` + `main(file, "training_X/common.yaml", checker)`)
so the verdict is the official one, not a re-implementation. Two things make
it safe to call repeatedly from one process: the module keeps a global queue of
rule files (`enqueued_configs`), which we empty before each file, and it
reports through the root `logging` logger, which we capture per file. Any
exception the checker raises on bad input becomes a FAIL with the reason; the
checker run on its own exits non-zero on the same file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mlperf_logging.compliance_checker import mlp_compliance

from perfwatch.core.ingest.discover import discover, open_regular
from perfwatch.core.ingest.mllog import TOKEN, parse_path
from perfwatch.core.layout import is_meant_as_log, run_id_for
from perfwatch.core.mlperf.live_checks import ENQUEUE_KEYS, unsafe_rule_value
from perfwatch.core.mlperf.rulesets import (
    PERFWATCH_RULES_DIR,
    USAGE,
    choose,
    config_for,
    is_official,
    log_date_ms,
    ruleset_for,
)
from perfwatch.core.mlperf.targets import RULES_DIR, training_rulesets

SNIFF_BYTES = 1 << 16
_LOCK = threading.RLock()  # the checker's config queue and the root logger are process-global


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The official verdict for one log file, with the checker's own words."""

    run_id: str
    path: str
    ruleset: str | None
    benchmark: str | None
    config: str | None  # the rule file the checker started from
    passed: bool
    messages: tuple[str, ...] = ()  # the checker's error messages (why it failed)
    warnings: tuple[str, ...] = ()  # warnings that do not fail the run
    log: tuple[str, ...] = field(default=(), repr=False)  # everything the checker logged
    error: str | None = None  # perfwatch could not run the checker, or the checker crashed
    ruleset_why: str = ""  # which rule chose the ruleset (mlperf/rulesets.py)

    def to_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "path": self.path,
            "ruleset": self.ruleset,
            "ruleset_why": self.ruleset_why,
            "benchmark": self.benchmark,
            "config": self.config,
            "passed": self.passed,
            "messages": list(self.messages),
            "warnings": list(self.warnings),
            "error": self.error,
            "log": list(self.log),
        }


# ---- finding logs -----------------------------------------------------------------------------------------
def _has_records(path: Path) -> bool:
    """Whether the file holds a `:::MLLOG` token anywhere (read in chunks, never all at once)."""
    token = TOKEN.rstrip()
    tail = b""
    try:
        with open_regular(path) as fh:
            while chunk := fh.read(SNIFF_BYTES):
                if token in tail + chunk:
                    return True
                tail = chunk[-len(token):]
    except OSError:
        return False
    return False


def find_logs(root: str | Path) -> list[Path]:
    """The run logs under `root` (the RunBook's discovery), or `root` itself when it is a file."""
    root = Path(root)
    if root.is_file():
        return [root]
    return [p for p in discover(root) if is_meant_as_log(p) or _has_records(p)]


# ---- which rules --------------------------------------------------------------------------------------------
def log_facts(path: Path) -> tuple[str | None, str | None, list[str], float | None]:
    """(submission_benchmark, submission_division) as the log first states them, unsafe rule names,
    and the time of the first record (to infer the ruleset).

    The checker builds rule-file paths from some values (`training_X/open_{benchmark}.yaml`) and
    executes the code in those files; a value such as `../../x` must never reach it.
    """
    try:
        events, _ = parse_path(str(path))
    except OSError:
        return None, None, [], None
    bench = division = None
    unsafe: list[str] = []
    for ev in events:
        if ev.key in ENQUEUE_KEYS:
            if unsafe_rule_value(ev.value):
                unsafe.append(f"{ev.key}={ev.value!r}")
            if ev.key == "submission_benchmark" and bench is None and isinstance(ev.value, str):
                bench = ev.value
            elif ev.key == "submission_division" and division is None and isinstance(ev.value, str):
                division = ev.value
    return bench, division, unsafe, log_date_ms(ev.time_ms for ev in events)


# ---- running the official checker ----------------------------------------------------------------------------
class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(f"{record.levelname} - {record.getMessage()}")
        except Exception:  # a malformed log call inside the checker must not abort the check
            self.lines.append(f"{record.levelname} - {record.msg!r}")


@contextlib.contextmanager
def captured_logs() -> Iterator[list[str]]:
    """Collect what mlperf_logging's checkers log through the root logger, and only that, meanwhile."""
    capture = _Capture()
    with _LOCK:
        root_logger = logging.getLogger()
        old_level = root_logger.level
        root_logger.addHandler(capture)  # also keeps logging.warning() from calling basicConfig()
        root_logger.setLevel(logging.INFO)
        try:
            yield capture.lines
        finally:
            root_logger.removeHandler(capture)
            root_logger.setLevel(old_level)


def _split_messages(checker: mlp_compliance.ComplianceChecker) -> tuple[tuple[str, ...], tuple[str, ...]]:
    errors = (*checker.overwritable.values(), *checker.not_overwritable)
    return tuple(str(m) for m in errors), tuple(str(m) for m in checker.warnings.values())


def check_file(path: str | Path, *, ruleset: str | None = None, root: str | Path | None = None) -> CheckResult:
    """The official checker's verdict on one file, run in the bounded worker (`bounded.py`): only on a file
    perfwatch parsed as valid mllog (another fails with the reason, as the checker fails parse errors),
    within a time budget. Never raises for bad input."""
    from perfwatch.core.mlperf import bounded

    path = Path(path)
    run_id = run_id_for(path, Path(root)) if root is not None else path.as_posix()
    if path.is_file():
        why = bounded.unreadable(str(path))
        if why is not None:
            benchmark, _division, _unsafe, first_ms = log_facts(path)
            chosen = choose(ruleset, path, benchmark, first_ms)
            return CheckResult(run_id, str(path), chosen.ruleset, benchmark, config_for(chosen.ruleset, benchmark),
                               False, ("Log lines had parsing errors.",), error=f"not run: {why}",
                               ruleset_why=chosen.why)
    try:
        data = bounded.compliance(str(path), ruleset, None if root is None else str(root))
    except bounded.OfficialTimeout as exc:
        return CheckResult(run_id, str(path), ruleset, None, None, False, error=f"stopped: {exc}")
    except bounded.OfficialFailure as exc:
        return CheckResult(run_id, str(path), ruleset, None, None, False, error=f"the official checker crashed: {exc}")
    return CheckResult(str(data["run_id"]), str(data["path"]), data["ruleset"], data["benchmark"], data["config"],
                       bool(data["passed"]), tuple(data["messages"]), tuple(data["warnings"]), tuple(data["log"]),
                       data["error"], str(data["ruleset_why"]))


def check_here(
    path: str | Path,
    *,
    ruleset: str | None = None,
    root: str | Path | None = None,
    quiet: bool = False,
    werror: bool = False,
) -> CheckResult:
    """Run the official checker on one file in this process (the bounded worker's side); never raises."""
    path = Path(path)
    run_id = run_id_for(path, Path(root)) if root is not None else path.as_posix()
    if ruleset is not None and ruleset not in training_rulesets():
        return CheckResult(run_id, str(path), ruleset, None, None, False,
                           error=f"unknown ruleset {ruleset!r}; known: {', '.join(training_rulesets())}")
    if not path.is_file():
        return CheckResult(run_id, str(path), ruleset, None, None, False, error="not a readable file")
    benchmark, _division, unsafe, first_ms = log_facts(path)
    chosen = choose(ruleset, path, benchmark, first_ms)
    rs, why = chosen.ruleset, chosen.why
    config = config_for(rs, benchmark)
    if unsafe:
        return CheckResult(run_id, str(path), rs, benchmark, config, False, ruleset_why=why,
                           error="not run: " + ", ".join(unsafe[:3]) + " would make the official checker load "
                           "and execute a rule file from outside its package")
    checker = mlp_compliance.make_checker(USAGE, rs, quiet, werror)
    error = None
    with captured_logs() as lines:
        del mlp_compliance.enqueued_configs[:]
        try:
            valid, _, _, _ = mlp_compliance.main(str(path), config, checker)
        except Exception as exc:  # the checker raises on some malformed records (e.g. no "key")
            valid = False
            error = f"the official checker crashed: {type(exc).__name__}: {exc}"
        finally:
            del mlp_compliance.enqueued_configs[:]
    messages, warnings = _split_messages(checker)
    if benchmark and not is_official(benchmark, rs) and config.startswith(f"{USAGE}_"):
        messages = (f"{benchmark!r} is not an MLPerf benchmark in ruleset {rs}, and perfwatch ships no rules for it "
                    f"in this ruleset (see {PERFWATCH_RULES_DIR}): the official checker cannot pass it", *messages)
    if error is None and not valid and not messages:
        messages = ("the checker failed without a message (see log)",)
    return CheckResult(
        run_id, str(path), rs, benchmark, config, bool(valid) and error is None,
        messages, warnings, tuple(lines), error, why,
    )


def check_tree(root: str | Path, *, ruleset: str | None = None) -> list[CheckResult]:
    """Check every run log under `root`."""
    root = Path(os.path.abspath(root))  # run ids as the RunBook gives them, however root is spelled
    return [check_file(p, ruleset=ruleset, root=root) for p in find_logs(root)]


def official_command(path: str | Path, ruleset: str, config: str | None = None) -> list[str]:
    """The equivalent stand-alone invocation, for users who want to reproduce a verdict."""
    argv = ["python", "-m", "mlperf_logging.compliance_checker", "--usage", USAGE, "--ruleset", ruleset]
    if config and not config.startswith(f"{USAGE}_"):
        argv += ["--config", config]
    return [*argv, str(path)]


__all__ = [
    "CheckResult", "RULES_DIR", "captured_logs", "check_file", "check_tree", "config_for", "find_logs",
    "is_official", "official_command", "ruleset_for",
]
