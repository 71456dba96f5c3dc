"""`perfwatch report LOGDIR`: time-to-train per run and olympic scores per benchmark."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfwatch.core import report as report_mod
from perfwatch.core import runbook


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="per-run results and olympic scores of a LOGDIR or an MLPerf results tree",
        description="Read every mllog file under LOGDIR (a perfwatch logdir, an MLPerf results tree at any "
        "level, or any folder of mllog files) and report time-to-train per run and the olympic score per "
        "benchmark folder, computed as MLPerf's result summarizer does.",
    )
    p.add_argument("logdir", type=Path, help="folder (or single file) holding mllog logs")
    p.add_argument("--format", choices=["table", "json", "markdown", "csv"], default="table")
    p.add_argument("--ruleset", help="MLPerf training ruleset for targets, e.g. 4.0.0 (default: from the path)")
    p.add_argument(
        "--no-cpu-peak", action="store_true",
        help="do not measure this host's matmul peak for the MFU of CPU runs (MFU shows — for them)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root: Path = args.logdir
    if not root.exists():
        print(f"perfwatch report: {root}: no such file or directory", file=sys.stderr)
        return 2
    book = runbook.load(root, ruleset=args.ruleset)
    if not book.runs:
        print(f"perfwatch report: {root}: no MLLOG records found", file=sys.stderr)
        return 1
    rep = report_mod.build(book, extra=report_mod.metrics_columns(measure_cpu_peak=not args.no_cpu_peak))
    print(report_mod.render(rep, args.format))
    return 0
