"""Options several commands share, declared once so their help and checks never drift apart."""

from __future__ import annotations

import argparse

RULESET_HELP = ("MLPerf Training ruleset, e.g. 4.0.0 (default: the version in the path, else inferred from the "
                "logs' dates and benchmark; every output says which and why)")


def add_ruleset(p: argparse.ArgumentParser) -> None:
    """`--ruleset`; an unknown value is refused with exit 2 by `cli.main` before the command runs."""
    p.add_argument("--ruleset", help=RULESET_HELP)


def ruleset_error(args: argparse.Namespace) -> str | None:
    """The message for a `--ruleset` mlperf_logging has no rules for, else None."""
    requested = getattr(args, "ruleset", None)
    if not requested:
        return None
    from perfwatch.core.mlperf.rulesets import UnknownRuleset, check_requested

    try:
        check_requested(requested)
    except UnknownRuleset as exc:
        return str(exc)
    return None
