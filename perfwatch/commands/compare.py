"""`perfwatch compare LOGDIR_A LOGDIR_B`: olympic time-to-train of A and B per benchmark, and the speed-up."""

from __future__ import annotations

import argparse
import sys

from perfwatch.commands._options import add_ruleset, path_arg
from perfwatch.text.escape import echo, json_text


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare",
        help="speed-up of B over A per benchmark (olympic time-to-train), with its spread across seeds",
        description="Score both folders as MLPerf's result summarizer does (olympic mean of time-to-train) "
        "and print, per benchmark, TTT(A) / TTT(B) with two decimals, the ratio of median times, a 90% "
        "bootstrap interval over the runs (seeds) and Welch's 95% interval with the runs needed. A and B: perfwatch LOGDIRs, results folders or run groups.",
    )
    p.add_argument("a", type=path_arg, help="the reference (baseline) runs")
    p.add_argument("b", type=path_arg, help="the runs to compare with A")
    add_ruleset(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfwatch.core.model import book as runbook
    from perfwatch.core.results.comparison import compare, render_comparisons
    from perfwatch.core.results.summary import campaign_plan

    books = []
    for label, root in (("A", args.a), ("B", args.b)):
        if not root.exists():
            print(f"perfwatch compare: {label} {root}: no such file or folder", file=sys.stderr)
            return 2
        stand_ins, targets = campaign_plan(root)  # a campaign's targets: "converged" as the live view judges it
        book = runbook.load(root, ruleset=args.ruleset, stand_ins=stand_ins, targets=targets)
        if not book.runs:
            print(f"perfwatch compare: {label} {root}: no mllog records found", file=sys.stderr)
            return 2
        books.append(book)
    rows = compare(books[0].views(), books[1].views(), str(args.a), str(args.b))
    if args.format == "json":
        print(json_text([c.to_json() for c in rows]))
    else:
        echo(render_comparisons(rows))
    return 0 if any(c.speedup is not None for c in rows) else 1
