"""P1, P4 and P5: ingest speed, memory, and `perfwatch report` vs MLPerf's own tools.

Run: python benchmarks/ingest.py [--lines 1000000] [--reference-lines 100000]

P1  one generated mllog file; lines/s of (a) mlperf_logging's `parse_file` (on the first
    --reference-lines lines: it manages ~15k lines/s, a full million takes over a minute),
    (b) a bare msgspec decode of every line's JSON into dicts, (c) perfwatch: streaming read
    + parse + run model, as `report`/`attach` do it. Prints the ratios (targets: c/a >= 30,
    c/b >= 0.6).
P4  RSS of a fresh process after ingesting 1M lines, and after 5M (the 1M-line file read 5
    times into the same run); target <= 150 MB and <= 10 % growth.
P5  `perfwatch report` vs mlperf_logging's summarizer (`_compute_strong_score_standalone`,
    which runs the compliance checker then parses each file) on the bundled results tree;
    same times to the millisecond, target >= 20x faster.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "mlperf-logs"


def generate(path: Path, lines: int, seed: int = 0) -> None:
    """A realistic long log: header, tracked_stats most of the time, evals, block markers, noise."""
    rng = random.Random(seed)
    t = 1_700_000_000_000
    head = [
        ("INTERVAL_START", "init_start", None, {}),
        ("POINT_IN_TIME", "submission_benchmark", "llama2_70b_lora", {}),
        ("POINT_IN_TIME", "submission_org", "perfwatch", {}),
        ("POINT_IN_TIME", "submission_division", "closed", {}),
        ("POINT_IN_TIME", "global_batch_size", 8, {}),
        ("INTERVAL_END", "init_stop", None, {}),
        ("INTERVAL_START", "run_start", None, {}),
    ]
    with open(path, "w") as fh:
        written = 0
        for et, key, value, md in head:
            md = {"file": "train.py", "lineno": 1, **md}
            fh.write(":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": et, "key": key,
                                                "value": value, "metadata": md}) + "\n")
            written += 1
        step = 0
        while written < lines:
            t += rng.randint(1, 20)
            step += 1
            r = step % 1000
            if r == 0:
                rec = {"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": "eval_accuracy",
                       "value": 1.0 - step / (lines * 1.5), "metadata": {"file": "train.py", "lineno": 181,
                                                                          "samples_count": step * 8}}
            elif r == 1:
                rec = {"namespace": "", "time_ms": t, "event_type": "INTERVAL_START", "key": "block_start",
                       "value": None, "metadata": {"file": "train.py", "lineno": 129, "samples_count": step * 8}}
            elif r == 500:
                fh.write(f"[rank0] step {step} loss {rng.random():.4f}\n")
                written += 1
                continue
            else:
                rec = {"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": "tracked_stats",
                       "value": {"throughput": 2.4 + rng.random() / 10, "loss": rng.random()},
                       "metadata": {"file": "train.py", "lineno": 161, "step": step}}
            prefix = "0: " if step % 3 == 0 else ""
            fh.write(prefix + ":::MLLOG " + json.dumps(rec) + "\n")
            written += 1
        stop = {"namespace": "", "time_ms": t + 1, "event_type": "INTERVAL_END", "key": "run_stop", "value": None,
                "metadata": {"file": "train.py", "lineno": 200, "status": "success"}}
        fh.write(":::MLLOG " + json.dumps(stop) + "\n")


def perfwatch_ingest(path: Path, times: int = 1) -> tuple[float, int]:
    from perfwatch.core.model.book import iter_blocks
    from perfwatch.core.model.run import Run

    run = Run("bench", str(path))
    t0 = time.perf_counter()
    n = 0
    for _ in range(times):
        for block in iter_blocks(path):
            run.feed_block(block)
            n += block.count(b"\n")
    run.view()
    return time.perf_counter() - t0, n


def bare_msgspec(path: Path) -> tuple[float, int]:
    decode = msgspec.json.Decoder().decode
    data = path.read_bytes()
    lines = data.split(b"\n")
    t0 = time.perf_counter()
    n = 0
    for line in lines:
        i = line.find(b":::MLLOG ")
        if i >= 0:
            decode(line[i + 9 :])
        n += 1
    return time.perf_counter() - t0, n


def reference_parse(path: Path, lines: int) -> tuple[float, int]:
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    sub = path.with_suffix(".head.txt")
    with open(path) as src, open(sub, "w") as dst:
        for i, line in enumerate(src):
            if i >= lines:
                break
            dst.write(line)
    t0 = time.perf_counter()
    parse_file(str(sub), ruleset="4.0.0")
    dt = time.perf_counter() - t0
    sub.unlink()
    return dt, lines


def rss_after(path: Path, times: int) -> float:
    code = (
        f"import sys, psutil; sys.path.insert(0, {str(ROOT)!r})\n"
        "from benchmarks.ingest import perfwatch_ingest\n"
        "from pathlib import Path\n"
        f"perfwatch_ingest(Path({str(path)!r}), {times})\n"
        "print(psutil.Process().memory_info().rss)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1e6


def p5() -> tuple[float, float, float, bool]:
    """Best-of-N seconds: the official summarizer (in-process), `perfwatch report` as a process, in-process."""
    from mlperf_logging.result_summarizer import result_summarizer as rs

    from perfwatch.core.model import book as runbook
    from perfwatch.core.results import summary as report

    folders = [p.parent for p in LOGS.rglob("result_0.txt")]

    def official() -> dict[str, float]:
        out: dict[str, float] = {}
        for folder in folders:
            ruleset = "4.0.0" if "v4.0" in str(folder) else "2.1.0"
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                per_file, _, _, _, _ = rs._compute_strong_score_standalone(
                    folder.name, "sys", False, str(folder), "training", ruleset, return_full_scores=True)
            out.update({str(Path(k).resolve()): v for k, v in per_file.items()})
        return out

    def best(fn, n: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
        times, result = [], None
        for _ in range(n):
            t0 = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t0)
        return min(times), result

    official()  # warm both sides' caches (rule files, imports) before timing
    report.build(runbook.load(LOGS))
    t_official, theirs = best(official, 3)
    t_cli, _ = best(lambda: subprocess.run([sys.executable, "-m", "perfwatch", "report", str(LOGS), "--format", "json"],
                                           capture_output=True, text=True, check=True), 3)
    # perfwatch in a process of its own (this one imported pandas for the summarizer, and a bigger
    # heap makes every GC pass slower): warm up once, then best of 10
    code = (
        "import time\nfrom perfwatch.core.model import book as runbook\nfrom perfwatch.core.results import summary as report\n"
        f"report.build(runbook.load({str(LOGS)!r}))\nts = []\n"
        "for _ in range(10):\n    t0 = time.perf_counter()\n"
        f"    report.build(runbook.load({str(LOGS)!r}))\n    ts.append(time.perf_counter() - t0)\n"
        "print(min(ts))\n"
    )
    t_lib = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout.strip())
    rep = report.build(runbook.load(LOGS))
    mine = {str((LOGS / r["path"]).resolve()): r["time_to_train_ms"] for r in rep.runs if r["converged"]}
    same = mine.keys() == theirs.keys() and all(round(theirs[k] * 60000) == mine[k] for k in theirs)
    return t_official, t_cli, t_lib, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--reference-lines", type=int, default=100_000)
    ap.add_argument("--skip-memory", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mllog.txt"
        generate(path, args.lines)
        size = path.stat().st_size / 1e6
        print(f"generated {args.lines:,} lines ({size:.0f} MB) on {os.cpu_count()} cores")
        # best of 3 for each side, interleaved, so a noisy second does not decide a ratio
        runs = [(reference_parse(path, args.reference_lines), bare_msgspec(path), perfwatch_ingest(path))
                for _ in range(3)]
        t_ref, n_ref = min(r[0] for r in runs)
        t_bare, n_bare = min(r[1] for r in runs)
        t_pw, n_pw = min(r[2] for r in runs)
        ref, bare, pw = n_ref / t_ref, n_bare / t_bare, n_pw / t_pw
        print("\nP1 ingest (lines/s)")
        print(f"  mlperf_logging parse_file ({n_ref:,} lines)   {ref:>12,.0f}")
        print(f"  bare msgspec decode to dicts          {bare:>12,.0f}")
        print(f"  perfwatch read+parse+run model        {pw:>12,.0f}")
        print(f"  ratio vs parse_file  {pw / ref:8.1f}x   (target >= 30x)")
        print(f"  ratio vs bare decode {pw / bare:8.2f}x   (target >= 0.6x)")
        if not args.skip_memory:
            r1 = rss_after(path, 1)
            r5 = rss_after(path, 5)
            print("\nP4 memory (RSS of a fresh process)")
            print(f"  after {args.lines:,} lines   {r1:8.1f} MB   (target <= 150 MB)")
            print(f"  after {5 * args.lines:,} lines   {r5:8.1f} MB   growth {100 * (r5 - r1) / r1:+.1f} % (target <= 10 %)")
    t_off, t_cli, t_lib, same = p5()
    print("\nP5 report on the bundled results tree (35 files, 4 benchmark folders)")
    print(f"  mlperf_logging summarizer (in-process)   {t_off:8.3f} s")
    print(f"  perfwatch report (in-process)            {t_lib:8.3f} s   {t_off / t_lib:6.1f}x faster (target >= 20x)")
    print(f"  perfwatch report (new process, CLI)      {t_cli:8.3f} s   {t_off / t_cli:6.1f}x faster")
    print(f"  same times to the ms as the summarizer: {same}")


if __name__ == "__main__":
    main()
