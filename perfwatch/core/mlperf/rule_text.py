"""The few fixed shapes of text perfwatch reads out of mlperf_logging's files.

A version in a results path (`v4.0`), a quality threshold (`v['value'] >= 0.720`), the rule file a
key's value selects (`enqueue_config('...{}...'.format(v['value']))`), the init budget of a division,
and the runs a submission holds (a dict literal in the RCP checker's source).
"""

from __future__ import annotations

import re

_VERSION = re.compile(
    r"""
    (?:^|[^0-9a-zA-Z])      # not inside a word
    [vV]
    (?P<major>\d+)
    \.(?P<minor>\d+)
    (?:\.(?P<patch>\d+))?
    (?![0-9])
    """,
    re.VERBOSE,
)

_ROUND = re.compile(
    r"""
    ^(?:(?:training_)?results[_-])?   # training_results_v4.0, results-v4.0, or only
    [vV]
    (?P<major>\d+)
    \.(?P<minor>\d+)
    (?:\.(?P<patch>\d+))?
    $
    """,
    re.VERBOSE,
)

_THRESHOLD = re.compile(
    r"""
    v\['value'\] \s*
    (?P<op>>=|<=) \s*
    (?P<number>[0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)
    """,
    re.VERBOSE,
)

_ENQUEUED_CONFIG = re.compile(
    r"""
    enqueue_config\( \s*
    '(?P<pattern>[^']+)' \s*
    \.format\( \s* v\['value'\] \s* \) \s*
    \)
    """,
    re.VERBOSE,
)

_DIVISION_BUDGET = re.compile(
    r"""
    compile_time_mins'\] \s* = \s*
    (?P<open>\d+) \s+
    if \s+ v\['value'\] \s* == \s* 'open' \s+
    else \s+
    (?P<closed>\d+)
    """,
    re.VERBOSE,
)

_QUOTED_COUNT = re.compile(r"'(?P<name>\w+)' \s* : \s* (?P<count>\d+)", re.VERBOSE)


def version_in_name(name: str) -> tuple[str, str, str | None] | None:
    """`(major, minor, patch or None)` of the first `vMAJOR.MINOR[.PATCH]` in a path component whose
    `v` is not inside a word."""
    m = _VERSION.search(name)
    return (m["major"], m["minor"], m["patch"]) if m else None


def round_in_name(name: str) -> tuple[str, str, str | None] | None:
    """`(major, minor, patch or None)` when a path component names an MLPerf round as a whole (`v4.0`,
    `training_results_v4.0`), not a version inside another name (a system called `..._n2_v5.0`)."""
    m = _ROUND.match(name)
    return (m["major"], m["minor"], m["patch"]) if m else None


def threshold(check: str) -> tuple[str, str] | None:
    """`(">=" or "<=", number)` of the first `v['value'] >= 0.72` in a check."""
    m = _THRESHOLD.search(check)
    return (m["op"], m["number"]) if m else None


def enqueued_config(post: str) -> str | None:
    """The rule file pattern of the first `enqueue_config('x_{}.yaml'.format(v['value']))`."""
    m = _ENQUEUED_CONFIG.search(post)
    return m["pattern"] if m else None


def division_budget(post: str) -> tuple[int, int] | None:
    """(open, closed) init minutes of the first `...compile_time_mins'] = 30 if v['value'] == 'open' else 20`."""
    m = _DIVISION_BUDGET.search(post)
    return (int(m["open"]), int(m["closed"])) if m else None


def quoted_counts(text: str) -> dict[str, int]:
    """The `'name': N` entries of a dict literal's source."""
    return {m["name"]: int(m["count"]) for m in _QUOTED_COUNT.finditer(text)}
