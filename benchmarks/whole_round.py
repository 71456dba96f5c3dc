"""A whole MLPerf Training round: `perfwatch report` on every submitter at once against MLCommons' result
summarizer run over each submitter, CPU seconds and peak memory, with an empty perfwatch cache.

Get a round (v4.0: ~600 MB of result files and power logs; its repository also holds code and binaries,
several GB, not needed here):

    git clone --filter=blob:none --no-checkout https://github.com/mlcommons/training_results_v4.0 round
    cd round && git sparse-checkout set --no-cone '/*/results/' '/*/systems/' && git checkout
    python benchmarks/whole_round.py round --ruleset 4.0.0 [--summarizer ORG ...] [--summarizer-all]

perfwatch is measured on the whole tree, in a new process with `XDG_CACHE_HOME` pointing at an empty
folder (no RCP verdict cached): wall time, CPU time (user + sys of it and its worker) and peak RSS (the
largest of the process tree). The summarizer (`python -m mlperf_logging.result_summarizer ORG training
RULESET`, the official command) runs on a copy of each submitter's folder (its RCP step rewrites
`scaling.json` in the folders it reads), one process per submitter, each bounded by --timeout; the
submitters it cannot finish (it divides by zero on some power folders) are listed, not counted.
By default only a sample of submitters (--summarizer ORG ..., default: the three smallest) is timed and
its CPU seconds per result file extrapolated to the round; --summarizer-all times every submitter.

CPU seconds are the figure compared (the machine may be shared: wall time is printed too).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
          timeout: float | None = None) -> tuple[float, float, int, subprocess.CompletedProcess[bytes] | None]:
    """(wall s, CPU s, return code or -9 on timeout, the process) of one command and its children."""
    before = _children_cpu()
    start = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, env=env or ENV, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return time.monotonic() - start, _children_cpu() - before, -9, None
    return time.monotonic() - start, _children_cpu() - before, done.returncode, done


def result_files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("result_*.txt") if "power" not in p.parts)


def measure_perfwatch(round_dir: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="perfwatch-cache-") as cache:
        env = {**ENV, "XDG_CACHE_HOME": cache, "PYTHONPATH": str(ROOT)}
        rss_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        wall, cpu, rc, done = timed([sys.executable, "-m", "perfwatch", "report", str(round_dir), "--format", "json"],
                                    env=env)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    body = json.loads(done.stdout) if done is not None and rc == 0 else {}
    benches = body.get("benchmarks", [])
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "returncode": rc,
            "peak_rss_mb": round(max(rss, rss_before) / 1024, 1),  # ru_maxrss: KiB, the largest child so far
            "runs": len(body.get("runs", [])), "folders": len(benches),
            "scored": sum(1 for b in benches if b.get("score_minutes") is not None),
            "energy_scored": sum(1 for b in benches if b.get("energy_score_j") is not None),
            "with_power_logs": sum(1 for b in benches if b.get("energy_source"))}


def measure_summarizer(round_dir: Path, orgs: list[str], ruleset: str, timeout: float) -> dict[str, object]:
    per_org = {}
    for org in orgs:
        with tempfile.TemporaryDirectory(prefix="summarizer-") as tmp:
            copy = Path(tmp) / org
            shutil.copytree(round_dir / org, copy, ignore=shutil.ignore_patterns("*.png"))
            wall, cpu, rc, done = timed([sys.executable, "-m", "mlperf_logging.result_summarizer", org, "training",
                                         ruleset], cwd=Path(tmp), timeout=timeout)
        failed = rc != 0 or (done is not None and b"Traceback" in done.stderr)
        per_org[org] = {"files": result_files(round_dir / org), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                        "finished": not failed}
        print(f"  summarizer {org}: {per_org[org]}", file=sys.stderr)
    done_orgs = [o for o, r in per_org.items() if r["finished"]]
    files = sum(int(per_org[o]["files"]) for o in done_orgs)  # type: ignore[call-overload]
    cpu = sum(float(per_org[o]["cpu_s"]) for o in done_orgs)  # type: ignore[arg-type]
    return {"per_org": per_org, "finished_files": files, "finished_cpu_s": round(cpu, 2),
            "cpu_s_per_file": cpu / files if files else None,
            "not_finished": [o for o in per_org if o not in done_orgs]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("round", type=Path, help="a round's tree: <org>/results/<system>/<benchmark>/result_*.txt")
    ap.add_argument("--ruleset", default="4.0.0")
    ap.add_argument("--summarizer", nargs="*", metavar="ORG", help="submitters the summarizer is timed on")
    ap.add_argument("--summarizer-all", action="store_true", help="time the summarizer on every submitter")
    ap.add_argument("--timeout", type=float, default=900.0, help="per submitter, seconds")
    args = ap.parse_args()
    orgs = sorted(p.name for p in args.round.iterdir() if (p / "results").is_dir())
    files = {org: result_files(args.round / org) for org in orgs}
    total = sum(files.values())
    print(f"round {args.round}: {len(orgs)} submitters, {total} result files", file=sys.stderr)
    mine = measure_perfwatch(args.round)
    print(f"  perfwatch report: {mine}", file=sys.stderr)
    chosen = orgs if args.summarizer_all else (args.summarizer or sorted(orgs, key=files.__getitem__)[:3])
    theirs = measure_summarizer(args.round, chosen, args.ruleset, args.timeout)
    per_file = theirs["cpu_s_per_file"]
    estimate = per_file * total if isinstance(per_file, float) else None
    out = {"round": str(args.round), "submitters": len(orgs), "result_files": total, "perfwatch": mine,
           "summarizer": theirs,
           "summarizer_cpu_s_whole_round": round(estimate, 1) if estimate else None,
           "estimated": not args.summarizer_all,
           "cpu_ratio": round(estimate / float(mine["cpu_s"]), 1) if estimate else None}  # type: ignore[arg-type]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
