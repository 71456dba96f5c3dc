"""MLPerf's rules as the official tools apply them: targets, rule selection, checker, scores, packages.

Why a layer: every verdict perfwatch prints must equal mlperf_logging's. The official checker is
called in-process (`checker`), the live checks judge the same rule files record by record
(`live_checks`), both pick rules through `rulesets`; `scores` is the summarizer's olympic mean,
`system` and `package_checks` the submission side.
"""

from perfwatch.core import lazy_exports

_EXPORTS = {
    "Target": "targets",
    "official_target": "targets",
    "training_rulesets": "targets",
    "latest_ruleset": "targets",
    "ruleset_for": "rulesets",
    "config_for": "rulesets",
    "LiveChecker": "live_checks",
    "Finding": "live_checks",
    "CheckResult": "checker",
    "check_file": "checker",
    "check_tree": "checker",
    "find_logs": "checker",
    "olympic_score": "scores",
    "score_runs": "scores",
    "BenchmarkScore": "scores",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
