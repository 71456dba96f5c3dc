"""`perfwatch check LOGDIR`: MLPerf's official compliance checker on every run; exit 0 only if all pass."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from perfwatch.commands._options import add_ruleset, path_arg
from perfwatch.text.escape import echo, json_text, one_line

if TYPE_CHECKING:  # mlperf_logging is imported when checking, not for `perfwatch --help`
    from perfwatch.core.mlperf.checker import CheckResult
    from perfwatch.core.mlperf.rcp import RcpVerdict

MAX_MESSAGE_LINES = 12


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check",
        help="run MLPerf's official compliance checker on every run log",
        description="Run mlperf_logging's compliance checker (in-process) on every run log under LOGDIR. "
        "Exit status 0 only if every run passes, 1 if any fails, 2 if nothing could be checked.",
    )
    p.add_argument("logdir", type=path_arg, help="a perfwatch LOGDIR, an MLPerf results tree, or one log file")
    add_ruleset(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def _indent(message: str) -> list[str]:
    lines = message.splitlines() or [""]
    out = ["      " + line for line in lines[:MAX_MESSAGE_LINES]]
    if len(lines) > MAX_MESSAGE_LINES:
        out.append(f"      … {len(lines) - MAX_MESSAGE_LINES} more lines (--format json shows all)")
    return out


def render_table(results: list[CheckResult]) -> str:
    width = max((len(one_line(r.run_id)) for r in results), default=6)
    lines = [f"{'run':<{width}}  {'ruleset':<7}  {'benchmark':<16}  verdict"]
    for r in results:
        verdict = "PASS" if r.passed else "FAIL"
        lines.append(f"{one_line(r.run_id):<{width}}  {r.ruleset or '-':<7}  {one_line(r.benchmark or '-'):<16}  "
                     f"{verdict}")
        if r.error:
            lines.extend(_indent(r.error))
        for m in r.messages:
            lines.extend(_indent(m))
        for w in r.warnings:
            lines.extend(_indent("warning: " + w))
    reasons: dict[tuple[str, str], int] = {}
    for r in results:
        key = (r.ruleset or "-", r.ruleset_why)
        reasons[key] = reasons.get(key, 0) + 1
    for (rs, why), n in reasons.items():
        lines.append(f"ruleset {rs} for {n} run(s): {why or 'not chosen'}")
    failed = sum(not r.passed for r in results)
    lines.append(f"{len(results) - failed}/{len(results)} runs pass the official compliance checker")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    root = Path(args.logdir)
    if not root.exists():
        print(f"perfwatch check: {root}: no such file or folder", file=sys.stderr)
        return 2
    from perfwatch.core.mlperf.checker import check_tree

    results = check_tree(root, ruleset=args.ruleset)
    if not results:
        print(f"perfwatch check: no mllog files under {root}", file=sys.stderr)
        return 2
    verdicts = rcp_verdicts(results)
    if args.format == "json":
        from perfwatch.core.results.summary import group_of_id

        body = []
        for r in results:
            entry = r.to_json()
            folder = group_of_id(r.run_id)
            verdict = verdicts.get(folder)
            entry["rcp"] = {"folder": folder, **verdict.to_json()} if verdict is not None else None
            body.append(entry)
        print(json_text(body))
    else:
        echo(render_table(results) + "\n" + "\n".join(rcp_lines(verdicts)))
    return 0 if all(r.passed for r in results) else 1


def rcp_verdicts(results: list[CheckResult]) -> dict[str, RcpVerdict]:
    """mlperf_logging's RCP verdict per benchmark folder (a results folder, or a job's repeats); folders of
    perfwatch's own workloads have none."""
    from perfwatch.core.layout import is_result_name
    from perfwatch.core.mlperf.checker import log_facts
    from perfwatch.core.mlperf.rcp import folder_verdict
    from perfwatch.core.mlperf.rulesets import is_official
    from perfwatch.core.mlperf.tree import division_of
    from perfwatch.core.results.summary import group_of_id

    groups: dict[str, list[CheckResult]] = {}
    for r in results:
        groups.setdefault(group_of_id(r.run_id), []).append(r)
    out = {}
    for folder, members in groups.items():
        first = members[0]
        if not (first.ruleset and is_official(first.benchmark, first.ruleset)):
            continue  # perfwatch's own workloads: no MLPerf RCP to speak of
        folder_path = Path(first.path).parent if is_result_name(Path(first.path).stem) else None
        division = division_of(folder_path, log_facts(Path(first.path))[1]).division
        out[folder] = folder_verdict([m.path for m in members], first.benchmark, first.ruleset, division)
    return out


def rcp_lines(verdicts: dict[str, RcpVerdict]) -> list[str]:
    lines = []
    for folder, v in verdicts.items():
        shown = v.verdict + (f" ×{v.normalization:.4f}" if v.verdict == "pass" and v.normalization > 1.0 else "")
        lines.append(f"RCP {one_line(folder)}: {shown}  ({one_line(v.message)})")
    return lines
