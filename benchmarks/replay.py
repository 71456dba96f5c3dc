"""Replay finished real logs and record what the live view's ETA would have said, then score it.

Run: python benchmarks/replay.py [PATH ...] [--git REPO_DIR ...] [--per-benchmark 12] [--json OUT]

Each log (a file, or every log under a folder; `--git` reads `*/results/*/*/result_N.txt` of a git
clone of an MLCommons results repository without a work tree) is fed record by record into the run
model on the log's own clock, and the ETA is refitted exactly when the engine would refit it live: on a
new eval, no sooner than `refit_gap_ms` after the last fit, in the log's time (a refit held back runs
when its time comes), and the text a front end shows is `Eta.text(elapsed)` with the elapsed time of the latest
record. Compressed time: nothing waits, the log's timestamps are the clock.

For every run that reached its target (the real crossing: the first eval at the target), at 25, 50 and
75 % of the time to that crossing, the shown ETA is scored:

- `≈ a ±b` (an interval): in when the real crossing lies within [a - b, a + b];
- `≥ a` (a lower bound): held when the real crossing comes at or after a;
- `not converging`: wrong (every scored run converged);
- `–`: nothing shown.

and over the whole run, the swings: a change between "not converging" and an estimate that is undone
within 60 s of log time. `--runs` lists, per run, from which fraction of the run on an estimate (`≈ ±`
or `≥`) is first shown and for which share of the run from 40 % on (both sampled at every 1 %).
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfwatch.core.ingest.discover import discover  # noqa: E402
from perfwatch.core.measure.eta import Eta, eta_to_target, refit_gap_ms  # noqa: E402
from perfwatch.core.mlperf.targets import official_target  # noqa: E402
from perfwatch.core.model.run import Run  # noqa: E402

CHECKPOINTS = (0.25, 0.50, 0.75)
SWING_MS = 60_000.0
RESULT = re.compile(r"^[^/]+/results/[^/]+/([^/]+)/result_(\d+)\.txt$")


@dataclass
class Shown:
    """What the live view showed at one moment."""

    kind: str  # "interval", "bound", "not_converging", "none"
    text: str
    lo_ms: float | None = None  # the stated range of the crossing, ms since run_start
    hi_ms: float | None = None


@dataclass
class Replayed:
    name: str
    benchmark: str
    evals: int
    real_ms: float  # the real crossing, ms since run_start
    at: dict[str, Shown] = field(default_factory=dict)  # "25", "50", "75" -> what was shown
    fits: int = 0
    swings: int = 0
    changes: int = 0  # how often the shown kind changed
    first_shown: float | None = None  # the first fraction of the run (1 % steps) with an estimate shown
    shown_late: float = 0.0  # the share of the 1 % steps from 40 % of the run on with an estimate shown

    def verdict(self, key: str) -> str:
        s = self.at[key]
        if s.kind == "interval":
            return "in" if s.lo_ms is not None and s.hi_ms is not None and s.lo_ms <= self.real_ms <= s.hi_ms \
                else "out"
        if s.kind == "bound":
            return "held" if s.lo_ms is not None and self.real_ms >= s.lo_ms - 1000.0 else "broken"
        return s.kind


def shown(eta: Eta | None, elapsed_ms: float) -> Shown:
    if eta is None:
        return Shown("none", "–")
    text = eta.text(elapsed_ms)
    if eta.status == "not_converging":
        return Shown("not_converging", text)
    if text.startswith("≈") and eta.at_ms is not None and eta.plus_minus_ms is not None:
        return Shown("interval", text, eta.at_ms - eta.plus_minus_ms, eta.at_ms + eta.plus_minus_ms)
    if text.startswith("≥") and eta.at_ms is not None:
        return Shown("bound", text, eta.at_ms, None)
    return Shown("none", text)


def replay(name: str, data: bytes) -> Replayed | None:
    """The run's ETA history on its own clock; None when the run never reached its target."""
    whole = Run(name)
    whole.feed_block(data, last=True)
    final = whole.view()
    target = final.target
    given = None  # the target the run is judged on when its log's own rules give none
    if target is None and final.benchmark:  # an open-division run: judged on the closed division's target
        target = official_target(final.benchmark, final.ruleset, "closed")
        if target is not None:
            given = target
            whole = Run(name, target=target)
            whole.feed_block(data, last=True)
            final = whole.view()
    if target is None or final.target_reached_ms is None or final.run_start_ms is None:
        return None
    start = final.run_start_ms
    real = final.target_reached_ms - start
    if real <= 0:
        return None
    run = Run(name, target=given)
    events = run.parser.feed_block(data, last=True)
    times = [ev.time_ms for ev in events]
    fits: list[tuple[float, Eta]] = []  # (log time of the fit, what it said)
    last_fit: float | None = None
    gap_ms = 0.0  # how long after the last fit a new eval waits for its refit
    due: float | None = None
    key = None
    i = 0
    n = len(events)
    while i < n:
        # a segment: records up to and including the next eval (or run_stop)
        j = i
        while j < n and events[j].key not in ("eval_accuracy", "run_stop"):
            j += 1
        seg = events[i:j + 1]
        if due is not None and seg and seg[-1].time_ms >= due:
            fits.append((due, eta_to_target(run.view())))  # the held-back refit, on what was known then
            last_fit, gap_ms, due = due, refit_gap_ms(due - start), None
        run.apply(seg)
        i = j + 1
        view = run.view()
        now = seg[-1].time_ms if seg else start
        if view.target_reached_ms is not None:
            break
        last = view.evals[-1] if view.evals else None
        new_key = (len(view.evals), last, view.phase == "stopped")
        if new_key == key:
            continue
        key = new_key
        if last_fit is not None and (now - last_fit) < gap_ms:
            due = last_fit + gap_ms
            continue
        fits.append((now, eta_to_target(view)))
        last_fit, gap_ms, due = now, refit_gap_ms(view.elapsed_ms), None
    out = Replayed(name, final.benchmark or "?", len(final.evals), real, fits=len(fits))
    fit_times = [t for t, _ in fits]

    def at(t_ms: float) -> Shown:
        k = bisect.bisect_right(fit_times, t_ms) - 1
        eta = fits[k][1] if k >= 0 else None
        r = bisect.bisect_right(times, t_ms) - 1
        elapsed = max(times[r] - start, 0.0) if r >= 0 else 0.0
        return shown(eta, elapsed)

    for frac in CHECKPOINTS:
        out.at[str(int(frac * 100))] = at(start + frac * real)
    seen = [at(start + pct / 100 * real).kind in ("interval", "bound") for pct in range(100)]
    out.first_shown = next((pct / 100 for pct, s in enumerate(seen) if s), None)
    out.shown_late = sum(seen[40:]) / 60
    # swings: "not converging" <-> an estimate, undone within a minute
    kinds = [(t, "nc" if e.status == "not_converging" else "est" if e.status == "converging" else "other")
             for t, e in fits]
    out.changes = sum(a[1] != b[1] for a, b in zip(kinds, kinds[1:], strict=False))
    for a, b, c in zip(kinds, kinds[1:], kinds[2:], strict=False):
        if {a[1], b[1]} == {"nc", "est"} and c[1] == a[1] and c[0] - b[0] <= SWING_MS:
            out.swings += 1
    return out


def from_paths(paths: list[str]) -> Iterator[tuple[str, bytes]]:
    for p in paths:
        for f in discover(Path(p)):
            yield str(f), f.read_bytes()


def from_git(repo: str, per_benchmark: int) -> Iterator[tuple[str, bytes]]:
    """Up to `per_benchmark` results of each benchmark, spread over submitters and systems."""
    names = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True,
                           text=True, check=True).stdout.split()
    by_bench: dict[str, list[str]] = defaultdict(list)
    for name in names:
        m = RESULT.match(name)
        if m and int(m.group(2)) < 3:
            by_bench[m.group(1)].append(name)
    for _bench, files in sorted(by_bench.items()):
        systems: dict[str, list[str]] = defaultdict(list)
        for f in files:
            systems[f.rsplit("/", 1)[0]].append(f)
        picked: list[str] = []
        while len(picked) < per_benchmark and any(systems.values()):
            for sysname in sorted(systems):
                if systems[sysname] and len(picked) < per_benchmark:
                    picked.append(sorted(systems[sysname]).pop(0))
                    systems[sysname] = sorted(systems[sysname])[1:]
        for f in picked:
            data = subprocess.run(["git", "-C", repo, "show", f"HEAD:{f}"], capture_output=True).stdout
            if data and len(data) < 8_000_000:
                yield f"{Path(repo).parent.name}:{f}", data


def table(results: list[Replayed]) -> str:
    lines = ["| at | runs | `≈ ±` shown | inside | `≥` shown | held | not converging | nothing shown | "
             "coverage of what is shown |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for frac in CHECKPOINTS:
        k = str(int(frac * 100))
        v = Counter(r.verdict(k) for r in results)
        shown_n = v["in"] + v["out"] + v["held"] + v["broken"] + v["not_converging"]
        good = v["in"] + v["held"]
        cov = f"{100 * good / shown_n:.0f} %" if shown_n else "–"
        lines.append(f"| {k} % | {len(results)} | {v['in'] + v['out']} | {v['in']} | {v['held'] + v['broken']} | "
                     f"{v['held']} | {v['not_converging']} | {v['none']} | {cov} |")
    swings = sum(r.swings for r in results)
    lines.append("")
    lines.append(f"swings (not converging <-> an estimate, undone within 60 s): {swings} in {len(results)} runs; "
                 f"fits {sum(r.fits for r in results)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", help="log files or folders")
    ap.add_argument("--git", action="append", default=[], help="a clone of mlcommons/training_results_vX.Y")
    ap.add_argument("--per-benchmark", type=int, default=12)
    ap.add_argument("--json", help="write every replayed run here")
    ap.add_argument("--by-benchmark", action="store_true", help="a table per benchmark too")
    ap.add_argument("--runs", action="store_true", help="per run: when an estimate is first shown, and how often")
    a = ap.parse_args(argv)
    sources: list[Iterator[tuple[str, bytes]]] = [from_paths(a.paths)]
    sources += [from_git(g, a.per_benchmark) for g in a.git]
    results: list[Replayed] = []
    for source in sources:
        for name, data in source:
            r = replay(name, data)
            if r is not None:
                results.append(r)
    print(table(results))
    if a.runs:
        print("\n| run | evals | crossing | first shown | shown from 40 % on | at 25/50/75 % |")
        print("| --- | ---: | ---: | ---: | ---: | --- |")
        for r in results:
            first = f"{100 * r.first_shown:.0f} %" if r.first_shown is not None else "never"
            at = " / ".join(r.at[k].text for k in ("25", "50", "75"))
            print(f"| {r.name} | {r.evals} | {r.real_ms / 1000:.1f} s | {first} | {100 * r.shown_late:.0f} % | {at} |")
    if a.by_benchmark:
        groups: dict[str, list[Replayed]] = defaultdict(list)
        for r in results:
            groups[r.benchmark].append(r)
        for bench, rs in sorted(groups.items()):
            print(f"\n{bench}\n{table(rs)}")
    if a.json:
        Path(a.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
