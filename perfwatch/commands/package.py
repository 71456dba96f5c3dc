"""`perfwatch package LOGDIR --out DIR --submitter ORG`: an MLPerf submission folder, checked by MLPerf's tools."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from perfwatch.commands._options import add_ruleset, path_arg
from perfwatch.text.escape import echo, json_text

if TYPE_CHECKING:
    from perfwatch.core.results.submission import PackageResult

# as perfwatch.core.results.submission has them (a test keeps them equal); here so --help imports nothing
DIVISIONS = ("open", "closed")
STATUSES = ("onprem", "cloud", "preview", "research")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "package",
        help="write an MLPerf submission folder (results/, systems/) and run MLPerf's checkers on it",
        description="Copy every finished run under LOGDIR to OUT/results/<system>/<benchmark>/result_N.txt, "
        "describe this host in OUT/systems/<system>.json, then run MLPerf's compliance checker on each "
        "result, its system-description checker, and its package checker where it applies. Never "
        "overwrites a result file; never writes outside --out. Exit 0 when every check passes, 1 when "
        "one fails, 2 when nothing was written.",
    )
    p.add_argument("logdir", type=path_arg, help="a perfwatch LOGDIR or a folder of mllog files")
    p.add_argument("--out", required=True, type=path_arg,
                   help="the submission folder (created; existing results are kept); never inside LOGDIR")
    p.add_argument("--submitter", required=True, help="submitting organization")
    p.add_argument("--system", help="system name (default: <N>x<device>_perfwatch)")
    p.add_argument("--division", choices=DIVISIONS, help="default: the campaign's, else the logs', else open")
    p.add_argument("--status", choices=STATUSES, help="default: the campaign's, else the logs', else onprem")
    add_ruleset(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def render(r: PackageResult) -> str:
    systems = ", ".join(r.systems or [r.system])
    lines = [f"packaged {len(r.placed)} run(s) into {r.out} (system{'s' if len(r.systems) > 1 else ''} {systems}, "
             f"ruleset {r.ruleset}, division {r.division})"]
    for p in r.placed:
        lines.append(f"  {p.dest}  <-  {p.run_id}")
    state = "written" if r.system_json_written else "kept (already there)"
    lines.append(f"  {r.system_json}  {state}")
    if r.unknown_fields:
        lines.append("  unknown on this host, left empty (fill in before submitting): " + ", ".join(r.unknown_fields))
    for note in r.notes:
        lines.append(f"  note: {note}")
    ok = sum(c.passed for c in r.compliance)
    lines.append(f"compliance_checker: {ok}/{len(r.compliance)} result files pass")
    for p, c in zip(r.placed, r.compliance, strict=False):
        if not c.passed:
            first = (c.error or (c.messages[0] if c.messages else "failed")).splitlines()[0]
            lines.append(f"  FAIL {p.dest}: {first}")
    for v in (r.system_check, r.package_check):
        if v is None:
            continue
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[v.passed]
        lines.append(f"{v.name}: {verdict}   ({v.command})")
        lines.extend(f"  {ln}" for ln in v.problems()[:20])
    return "\n".join(lines)


def out_inside(logdir: Path, out: Path) -> str | None:
    """Why OUT cannot be written to: it is LOGDIR or inside it (the copies would become runs of the
    campaign, and the next `report` would count them twice). Paths are compared resolved (symlinks,
    `..`), OUT's missing tail included."""
    src, dst = logdir.resolve(), out.resolve()
    if dst == src or src in dst.parents:
        return f"is inside the LOGDIR {logdir} (its copies would be read as more runs); choose a folder outside it"
    return None


def run(args: argparse.Namespace) -> int:
    from perfwatch.core.results.submission import PackageError, package

    why = out_inside(args.logdir, args.out)
    if why:
        print(f"perfwatch package: --out {args.out}: {why}", file=sys.stderr)
        return 2
    try:
        result = package(args.logdir, args.out, submitter=args.submitter, system=args.system,
                         division=args.division, status=args.status, ruleset=args.ruleset)
    except PackageError as exc:
        print(f"perfwatch package: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"perfwatch package: {exc}", file=sys.stderr)
        return 2
    echo(json_text(result.to_json()) if args.format == "json" else render(result))
    return 0 if result.passed else 1
