"""Two trees of perfwatch measured side by side in one run: did a change cost speed?

    python benchmarks/side_by_side.py --old REV [--new WORKTREE] [--rounds 2] [--lines 300000] [--tui-seconds 20]

`--old` is a git revision (extracted with `git archive` into a temporary folder: the repository is not
touched) and `--new` a source tree (default: this one). Each round runs, for old then new, the same two
benchmark scripts of their own tree with PYTHONPATH set to that tree:

- `benchmarks/ingest.py` (P1 lines/s of read + parse + run model; P5 `report` in-process and as a CLI),
- `benchmarks/tui_cpu.py` (P3 TUI CPU median, live and idle, 16 runs x 10 lines/s in tmux 120x40).

Rounds alternate old/new so that a noisy minute hits both; the best figure of each side is kept and the
ratio new/old printed (1.00 = same; for lines/s higher is better, for seconds and CPU lower is better).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

INGEST_PATTERNS = {
    "p1_lines_per_s": (r"perfwatch read\+parse\+run model\s+([\d,]+)", max),
    "p5_inprocess_s": (r"perfwatch report \(in-process\)\s+([\d.]+) s", min),
    "p5_cli_s": (r"perfwatch report \(new process, CLI\)\s+([\d.]+) s", min),
}


def extract(rev: str, dest: Path) -> Path:
    """The tree of `rev` as plain files in `dest` (git archive | tar), without touching the repository."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def run_script(tree: Path, args: list[str], timeout: float) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True,
                         timeout=timeout)
    return out.stdout + out.stderr


def ingest_figures(tree: Path, lines: int) -> dict[str, float]:
    text = run_script(tree, ["benchmarks/ingest.py", "--lines", str(lines),
                             "--reference-lines", str(max(10_000, lines // 20)), "--skip-memory"], 900)
    figures = {}
    for name, (pattern, _) in INGEST_PATTERNS.items():
        m = re.search(pattern, text)
        if m:
            figures[name] = float(m.group(1).replace(",", ""))
    if not figures:
        raise SystemExit(f"benchmarks/ingest.py in {tree} printed nothing usable:\n{text[-2000:]}")
    return figures


def tui_figures(tree: Path, seconds: int) -> dict[str, float]:
    # this tree's script for both sides (`--tree`): an older script measured CPU in 10 ms ticks
    text = run_script(tree, [str(REPO / "benchmarks" / "tui_cpu.py"), "--seconds", str(seconds), "--tree", str(tree)],
                      60 + 3 * seconds)
    m = re.search(r"\{.*\}", text, re.S)
    if not m:
        raise SystemExit(f"benchmarks/tui_cpu.py in {tree} printed no result:\n{text[-2000:]}")
    data = json.loads(m.group(0))
    return {"p3_live_cpu_pct": data["live_cpu_pct_median"], "p3_idle_cpu_pct": data["idle_cpu_pct_median"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="git revision of the tree to compare against")
    ap.add_argument("--new", type=Path, default=REPO, help="source tree to measure (default: this one)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--tui-seconds", type=int, default=20)
    ap.add_argument("--skip-tui", action="store_true")
    args = ap.parse_args()
    if not args.skip_tui and shutil.which("tmux") is None:
        print("tmux is not installed (apt-get install tmux), or pass --skip-tui", file=sys.stderr)
        return 2
    best = {"old": {}, "new": {}}  # type: dict[str, dict[str, float]]
    better = {name: pick for name, (_, pick) in INGEST_PATTERNS.items()}
    better.update({"p3_live_cpu_pct": min, "p3_idle_cpu_pct": min})
    with tempfile.TemporaryDirectory(prefix="pw-side-by-side-") as tmp:
        trees = {"old": extract(args.old, Path(tmp) / "old"), "new": args.new.resolve()}
        for r in range(args.rounds):
            for side in ("old", "new"):
                figures = ingest_figures(trees[side], args.lines)
                if not args.skip_tui:
                    figures.update(tui_figures(trees[side], args.tui_seconds))
                print(f"round {r + 1} {side}: {json.dumps(figures)}", flush=True)
                for k, v in figures.items():
                    best[side][k] = better[k](best[side].get(k, v), v)
    print(f"\nbest of {args.rounds} rounds on {os.cpu_count()} cores; old = {args.old}, new = {args.new}")
    print(f"{'figure':<20}{'old':>14}{'new':>14}{'new/old':>10}")
    for k in best["old"]:
        o, n = best["old"][k], best["new"].get(k)
        ratio = f"{n / o:10.2f}" if n is not None and o else f"{'—':>10}"
        print(f"{k:<20}{o:>14,.3f}{(n if n is not None else float('nan')):>14,.3f}{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
