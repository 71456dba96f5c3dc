"""MLPerf's rules as the official tools apply them: targets, rule selection, checker, scores, packages.

Why a layer: every verdict perfwatch prints must equal mlperf_logging's. The official checker is
called in-process (`checker`), the live checks judge the same rule files record by record
(`live_checks`), both pick rules through `rulesets`; `scores` is the summarizer's olympic mean,
`system` and `package_checks` the submission side.
"""
