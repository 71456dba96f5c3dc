"""`perfwatch peak`: the host's CPU matmul peak for the MFU of CPU runs, shown or measured on purpose."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "peak",
        help="show (or --measure) this host's CPU matmul peak used for the MFU of CPU runs",
        description="Without options: the CPU peaks stored on this host, with when and how each was measured. "
        "With --measure: time a torch matmul (best of --tries) and store it; refused when the CPUs are busy "
        "(a campaign running) since the peak would come out too low, unless --force, which stores it "
        "flagged with how busy they were. report, check, compare and the live view only read what is "
        "stored; they never measure.",
    )
    p.add_argument("--measure", action="store_true", help="measure now and store the result")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32", help="matmul dtype (default fp32)")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's own count)")
    p.add_argument("--tries", type=int, default=5, help="matmuls timed; the fastest counts (default 5)")
    p.add_argument("--force", action="store_true", help="measure even when the CPUs are busy (flagged)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def max_threads() -> int:
    """The most `--threads` a measurement accepts: 4 per CPU, never more than 1,024 (torch and OpenMP
    die with SIGSEGV well before 100,000 threads)."""
    import os

    return min(4 * (os.cpu_count() or 1), 1024)


def run(args: argparse.Namespace) -> int:
    from perfwatch.core.measure import host_peak

    if args.measure:
        if args.tries < 1 or (args.threads is not None and args.threads < 1):
            print("perfwatch peak: --tries and --threads must be at least 1", file=sys.stderr)
            return 2
        if args.threads is not None and args.threads > max_threads():
            print(f"perfwatch peak: --threads {args.threads}: more than {max_threads()} (4 per CPU of this "
                  "host); more threads than CPUs only measure contention", file=sys.stderr)
            return 2
        try:
            found = host_peak.measure(args.dtype, threads=args.threads, tries=args.tries, force=args.force)
        except host_peak.MachineBusy as exc:
            print(f"perfwatch peak: not measured: {exc}", file=sys.stderr)
            return 1
        except ImportError:
            print("perfwatch peak: measuring needs torch (pip install torch)", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"perfwatch peak: cannot store the result: {exc}", file=sys.stderr)
            return 2
        entries = [found]
    else:
        entries = host_peak.stored()
    if args.format == "json":
        from perfwatch.text.escape import json_text

        print(json_text([e.to_json() for e in entries]))
        return 0
    if not entries:
        print(f"no CPU peak stored on this host ({host_peak.cache_path()}); `perfwatch peak --measure` measures it")
        return 0
    for e in entries:
        p = e.peak()
        print(f"{p.device} {p.dtype}: {p.flops / 1e9:,.1f} GFLOP/s  ({p.source})")
    return 0
