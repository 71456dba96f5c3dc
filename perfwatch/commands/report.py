"""`perfwatch report LOGDIR`: time-to-train per run and olympic scores per benchmark."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from perfwatch.commands._options import add_ruleset, path_arg

if TYPE_CHECKING:
    from perfwatch.core.model.book import RunBook
from perfwatch.text.escape import echo, printable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="per-run results and olympic scores of a LOGDIR or an MLPerf results tree",
        description="Read every mllog file under LOGDIR (a perfwatch logdir, an MLPerf results tree at any "
        "level, or any folder of mllog files) and report time-to-train per run and the olympic score per "
        "benchmark folder, computed as MLPerf's result summarizer does.",
    )
    p.add_argument("logdir", type=path_arg, help="folder (or single file) holding mllog logs")
    p.add_argument("--format", choices=["table", "json", "markdown", "csv", "html"], default="table",
                   help="html: one self-contained page (tables, inline SVG plots) on stdout: > report.html")
    add_ruleset(p)
    p.add_argument(
        "--baseline", metavar="RUN_OR_JOB",
        help="add a grid of speed-ups normalized to this run, job or folder (geometric mean across benchmarks)",
    )
    p.add_argument(
        "--mila-json", type=path_arg, metavar="DIR",
        help="also write one Mila-style JSON report per run (train_item stats after warm-up) into DIR",
    )
    p.add_argument(
        "--no-cpu-peak", action="store_true",
        help="leave out the CPU peak stored by `perfwatch peak --measure` (MFU of CPU runs shows —)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfwatch.core.model import book as runbook
    from perfwatch.core.results import summary as report_mod

    root: Path = args.logdir
    if not root.exists():
        print(f"perfwatch report: {root}: no such file or directory", file=sys.stderr)
        return 2
    from perfwatch.text.progress import ReadProgress

    stand_ins, targets = report_mod.campaign_plan(root)
    progress = ReadProgress(f"perfwatch report: reading {root}:")
    book = runbook.load(root, ruleset=args.ruleset, stand_ins=stand_ins, targets=targets, progress=progress)
    progress.done()
    recorded = report_mod.recorded_runs(book.root)  # a campaign's every run, logged or not, as perfwatch.json says
    if not book.runs and not recorded:
        print(f"perfwatch report: {root}: no MLLOG records found", file=sys.stderr)
        return 1
    rep = report_mod.build(book, extra=report_mod.metrics_columns(measure_cpu_peak=not args.no_cpu_peak, logdir=book.root),
                           recorded=recorded)
    grid = None
    if args.baseline:
        from perfwatch.core.results.comparison import baseline_grid, render_grid

        grid = baseline_grid(rep.benchmarks, args.baseline)
        if "error" in grid:
            print(f"perfwatch report: --baseline: {grid['error']}", file=sys.stderr)
            return 2
    if args.mila_json:
        try:
            _write_mila(book, args.mila_json)
        except OSError as exc:
            print(f"perfwatch report: --mila-json {args.mila_json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    from perfwatch.core.results import ranks as rank_mod

    ranked = rank_mod.ranked_runs(book.views())
    if args.format == "json":
        from perfwatch.text.escape import json_text

        body = rep.as_dict()
        if grid is not None:
            body["baseline_grid"] = grid
        if ranked:
            body["ranks"] = rank_mod.ranks_json(ranked)
        print(json_text(body))
        return 0
    if args.format == "html":
        from perfwatch.exporters import html

        print(html.render(rep, book, title=f"perfwatch report — {printable(str(root))}"), end="")
        return 0
    echo(report_mod.render(rep, args.format))
    if grid is not None:
        print()
        echo(render_grid(grid))
    if ranked and args.format in ("table", "markdown"):
        print()
        echo(rank_mod.render_ranks(ranked, args.format))
    return 0


def _write_mila(book: RunBook, out: Path) -> None:
    from perfwatch.core.results.comparison import mila_run_report
    from perfwatch.core.results.submission import safe_component
    from perfwatch.text.escape import json_text

    if out.exists() and not out.is_dir():
        raise NotADirectoryError(20, "exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    for view in book.views():
        stem = safe_component(view.run_id.replace("/", "__"), "run")
        name, n = stem + ".json", 1
        while name.lower() in used:  # two run ids that flatten to one name: never overwrite a report
            n += 1
            name = f"{stem}-{n}.json"
        used.add(name.lower())
        (out / name).write_text(json_text(mila_run_report(view)) + "\n")

