"""Options several commands share, declared once so their help and checks never drift apart."""

from __future__ import annotations

import argparse
from pathlib import Path

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


def path_arg(text: str) -> Path:
    """argparse `type=` for every path argument: an empty or blank path is refused (exit 2) instead of
    silently meaning the current folder (`control "" RUN stop` must not stop a run of the campaign in `.`)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: an empty path; name the folder (`.` for the current one)")
    return Path(text)
