"""Comparisons between runs: A vs B speed-ups, a grid normalized to a baseline, Mila-style run reports.

Speed-up is always "how many times faster": `TTT(A) / TTT(B)` for `compare A B`
(B faster -> > 1), `TTT(baseline) / TTT(row)` in the grid, the way MosaicML
states its methods-vs-baseline gain and the Mila suite normalizes to a
reference report (the baseline is 1.00). Across benchmarks the grid takes the
geometric mean of the ratios (milabench's and the Mila suite's summary).

Spread across seeds: the runs of A and B are independent seeds, not pairs, so
there is no per-seed ratio. We report (1) the ratio of the median times and (2)
a 90 % percentile-bootstrap interval of the olympic ratio: resample each side's
runs with replacement, score both with the official olympic rule, take the
ratio, 2000 times, with a fixed seed so the same logs always print the same
interval.
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfwatch.core import keys
from perfwatch.core.ingest.sanitize import one_line
from perfwatch.core.mlperf.scores import MS_PER_MINUTE, energy_score, olympic_score
from perfwatch.core.model.run import RunView
from perfwatch.core.results.stats import METHOD, Welch, welch
from perfwatch.core.results.summary import energy_group, group_of, group_of_id, minutes_of, score_group

BOOTSTRAP_ROUNDS = 2000
BOOTSTRAP_SEED = 20221013
INTERVAL = (0.05, 0.95)


@dataclass(frozen=True, slots=True)
class Side:
    """One benchmark's runs on one side of a comparison."""

    folder: str
    benchmark: str | None
    runs: int
    minutes: tuple[float, ...]  # converged runs' time-to-train
    non_converged: int
    score: float | None  # olympic minutes × scaling.json's factor (the official score)
    note: str
    scaling: float = 1.0  # the folder's scaling.json factor
    energy_kj: tuple[float, ...] = ()  # converged runs' GPU energy-to-train, where telemetry recorded it
    # MLPerf power logs (a results folder with `power/`): (minutes or None, joules or None) per run,
    # the folder's energy score (olympic joules × scaling) and why there is none
    power_runs: tuple[tuple[float | None, float | None], ...] = ()
    energy_score_j: float | None = None
    energy_note: str = ""

    @property
    def energy_median(self) -> float | None:
        return statistics.median(self.energy_kj) if self.energy_kj else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.minutes) if self.minutes else None


@dataclass(frozen=True, slots=True)
class Comparison:
    benchmark: str
    a: Side | None
    b: Side | None
    speedup: float | None  # a.score / b.score
    median_ratio: float | None
    interval: tuple[float, float] | None  # bootstrap percentile interval of the speed-up
    note: str
    welch: Welch | None = None  # 95 % interval, significance and runs needed (results/stats.py)
    # MLPerf power logs: energy score of A / energy score of B (> 1: B uses less energy to train) and
    # its 90 % bootstrap interval
    energy_score_ratio: float | None = None
    energy_interval: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        def side(s: Side | None) -> dict[str, Any] | None:
            if s is None:
                return None
            return {"folder": s.folder, "runs": s.runs, "converged": len(s.minutes), "score_minutes": s.score,
                    "scaling_factor": s.scaling,
                    "median_minutes": s.median, "min_minutes": min(s.minutes, default=None),
                    "max_minutes": max(s.minutes, default=None), "note": s.note,
                    "energy_to_train_kj_median": s.energy_median, "energy_runs": len(s.energy_kj),
                    "energy_score_j": s.energy_score_j, "energy_note": s.energy_note or None}
        ea, eb = (self.a.energy_median if self.a else None), (self.b.energy_median if self.b else None)
        return {"benchmark": self.benchmark, "a": side(self.a), "b": side(self.b), "speedup": self.speedup,
                "energy_ratio": _ratio(ea, eb),
                "energy_score_ratio": self.energy_score_ratio,
                "energy_score_interval90": list(self.energy_interval) if self.energy_interval else None,
                "median_ratio": self.median_ratio,
                "interval90": list(self.interval) if self.interval else None,
                "ci95": self.welch.to_json() if self.welch else None, "note": self.note}


def _minutes(view: RunView) -> float | None:
    ttt = view.time_to_train_ms
    return ttt / MS_PER_MINUTE if view.converged and ttt is not None else None


def _energy_kj(view: RunView) -> float | None:
    """GPU energy-to-train of a converged run, from the telemetry.jsonl beside its log (None: not recorded)."""
    from perfwatch.core.measure.energy import energy_to_train
    from perfwatch.core.telemetry.jsonl import read_telemetry

    if not view.converged or not view.path:
        return None
    ett = energy_to_train(view, read_telemetry(Path(view.path).parent))
    return ett.energy.kj if ett is not None and ett.finished else None


def sides(views: Iterable[RunView], label: str = "") -> dict[str, list[Side]]:
    """Score every run group (a results folder or a job's repeats), keyed by benchmark."""
    groups: dict[str, list[RunView]] = {}
    for v in views:
        groups.setdefault(group_of(v), []).append(v)
    out: dict[str, list[Side]] = {}
    for folder, members in groups.items():
        scored = score_group(members)
        bench = scored.benchmark
        ok = tuple(sorted(m for m in map(_minutes, members) if m is not None))
        shown = (label if folder == "." else f"{label.rstrip('/')}/{folder}") if label else folder
        factor = scored.scaling_factor if math.isfinite(scored.scaling_factor) else 1.0
        energy = tuple(e for e in (_energy_kj(v) for v in members) if e is not None)
        power = energy_group(members, scored)
        power_runs = tuple((minutes_of(v), power.runs[v.run_id].joules) for v in members) if power else ()
        side = Side(shown, bench, len(members), ok, len(members) - len(ok), scored.score_minutes, scored.note,
                    factor, energy, power_runs, power.score.joules if power else None,
                    power.score.note if power else "")
        out.setdefault(bench or folder, []).append(side)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0 or not math.isfinite(a) or not math.isfinite(b):
        return None
    return a / b


def bootstrap_interval(a: Side, b: Side, rounds: int = BOOTSTRAP_ROUNDS,
                       seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """Percentile interval of the olympic speed-up when each side's runs are resampled."""
    pool_a = [*a.minutes, *([math.inf] * a.non_converged)]
    pool_b = [*b.minutes, *([math.inf] * b.non_converged)]
    if len(a.minutes) < 2 or len(b.minutes) < 2:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(rounds):
        ra = [rng.choice(pool_a) for _ in pool_a]
        rb = [rng.choice(pool_b) for _ in pool_b]
        sa = olympic_score([m for m in ra if math.isfinite(m)], sum(not math.isfinite(m) for m in ra), a.benchmark)
        sb = olympic_score([m for m in rb if math.isfinite(m)], sum(not math.isfinite(m) for m in rb), b.benchmark)
        r = _ratio(sa * a.scaling if sa is not None else None, sb * b.scaling if sb is not None else None)
        if r is not None:
            ratios.append(r)
    if len(ratios) < rounds // 2:
        return None
    ratios.sort()
    lo = ratios[int(INTERVAL[0] * (len(ratios) - 1))]
    hi = ratios[int(INTERVAL[1] * (len(ratios) - 1))]
    return lo, hi


def energy_bootstrap_interval(a: Side, b: Side, rounds: int = BOOTSTRAP_ROUNDS,
                              seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """Percentile interval of the energy-score ratio A/B when each side's runs (time and joules together)
    are resampled, each resample scored with the official energy rule (`scores.energy_score`)."""
    if a.energy_score_j is None or b.energy_score_j is None:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(rounds):
        sa = _energy_resample(a, rng)
        sb = _energy_resample(b, rng)
        r = _ratio(sa, sb)
        if r is not None:
            ratios.append(r)
    if len(ratios) < rounds // 2:
        return None
    ratios.sort()
    return ratios[int(INTERVAL[0] * (len(ratios) - 1))], ratios[int(INTERVAL[1] * (len(ratios) - 1))]


def _energy_resample(side: Side, rng: random.Random) -> float | None:
    pool = side.power_runs
    drawn = [pool[rng.randrange(len(pool))] for _ in pool]
    return energy_score(side.benchmark, [(str(i), m, j) for i, (m, j) in enumerate(drawn)], side.scaling).joules


def compare(views_a: Iterable[RunView], views_b: Iterable[RunView], label_a: str = "",
            label_b: str = "") -> list[Comparison]:
    """Per benchmark: olympic TTT of A and B, speed-up A/B and its spread across seeds."""
    sa, sb = sides(views_a, label_a), sides(views_b, label_b)
    out = []
    for bench in sorted(set(sa) | set(sb)):
        la, lb = sa.get(bench, []), sb.get(bench, [])
        if len(la) > 1 or len(lb) > 1:
            which = "A" if len(la) > 1 else "B"
            folders = ", ".join(s.folder for s in (la if len(la) > 1 else lb))
            out.append(Comparison(bench, None, None, None, None, None,
                                  f"{which} holds several folders for {bench} ({folders}): pass one folder per side"))
            continue
        a = la[0] if la else None
        b = lb[0] if lb else None
        if a is None or b is None:
            out.append(Comparison(bench, a, b, None, None, None, f"only in {'A' if b is None else 'B'}"))
            continue
        speedup = _ratio(a.score, b.score)
        note = "" if speedup is not None else "no olympic score on one side: " + (a.note or b.note)
        out.append(Comparison(bench, a, b, speedup, _ratio(a.median, b.median), bootstrap_interval(a, b), note,
                              welch_of(a, b), _ratio(a.energy_score_j, b.energy_score_j),
                              energy_bootstrap_interval(a, b)))
    return out


def welch_of(a: Side, b: Side) -> Welch | None:
    """Welch's 95 % interval of A/B over each side's converged runs (times × their folder's scaling)."""
    return welch([m * a.scaling for m in a.minutes], [m * b.scaling for m in b.minutes])


def welch_text(w: Welch | None) -> str:
    if w is None:
        return "95% interval: needs 2 converged runs a side"
    p = "p < 1e-6" if w.p_value < 1e-6 else f"p = {w.p_value:.2g}"
    verdict = f"significant ({p})" if w.significant else f"not significant ({p})"
    need = (f"; about {w.runs_needed} runs per side resolve a {fmt_x(w.ratio)} difference (80% power)"
            if w.runs_needed else "")
    return f"95% interval {fmt_x(w.low)}–{fmt_x(w.high)} ({METHOD}), {verdict}{need}"


def fmt_x(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}×"


def render_comparisons(rows: Sequence[Comparison]) -> str:
    lines = []
    for c in rows:
        lines.append(f"{one_line(str(c.benchmark))}:")
        for label, s in (("A", c.a), ("B", c.b)):
            if s is None:
                continue
            score = f"{s.score:.2f} min" if s.score is not None else "no score"
            spread = f" (runs {min(s.minutes):.2f}–{max(s.minutes):.2f})" if s.minutes else ""
            scaled = f" (olympic × scaling.json {s.scaling:g})" if s.scaling != 1.0 else " olympic"
            lines.append(f"  {label} {one_line(str(s.folder))}: {score}{scaled}, {len(s.minutes)}/{s.runs} converged{spread}")
        if c.speedup is not None and c.a and c.b and c.a.score and c.b.score:
            lines.append(f"  {c.a.score:.2f} min → {c.b.score:.2f} min: {fmt_x(c.speedup)} faster")
            spread = f"ratio of medians {fmt_x(c.median_ratio)}"
            if c.interval:
                spread += f", 90% bootstrap interval {fmt_x(c.interval[0])}–{fmt_x(c.interval[1])}"
            lines.append(f"  spread across seeds: {spread}")
            lines.append(f"  {welch_text(c.welch)}")
        ea, eb = (c.a.energy_median if c.a else None), (c.b.energy_median if c.b else None)
        if ea is not None or eb is not None:
            def kj(v: float | None) -> str:
                return "not recorded" if v is None else f"{v:,.1f} kJ"
            ratio = _ratio(ea, eb)
            lines.append(f"  GPU energy-to-train (median): A {kj(ea)}, B {kj(eb)}"
                         + (f": B uses {1 / ratio:.2f}× the energy of A" if ratio else ""))
        lines += _power_log_lines(c)
        if c.note:
            lines.append(f"  note: {one_line(c.note)}")
    return "\n".join(lines)


def _power_log_lines(c: Comparison) -> list[str]:
    """The energy scores from MLPerf power logs, when either side has them."""
    sides_with = [(label, s) for label, s in (("A", c.a), ("B", c.b)) if s is not None and s.power_runs]
    if not sides_with:
        return []
    def said(s: Side) -> str:
        return f"{s.energy_score_j:,.0f} J" if s.energy_score_j is not None else (s.energy_note or "no energy score")
    out = ["  energy score (MLPerf power log): " + ", ".join(f"{label} {said(s)}" for label, s in sides_with)]
    if c.energy_score_ratio is not None:
        spread = (f", 90% bootstrap interval {fmt_x(c.energy_interval[0])}–{fmt_x(c.energy_interval[1])}"
                  if c.energy_interval else "")
        out.append(f"  energy A / B {fmt_x(c.energy_score_ratio)}{spread}")
    return out


# ---- baseline-normalized grid (report --baseline) ----------------------------------------------------------
def row_of(folder: str, benchmark: str | None = None) -> str:
    """The grid row of a run group: the system of `[results/]<system>/<benchmark>`, else the group."""
    parts = folder.split("/")
    if len(parts) >= 2 and (parts[-1] == benchmark or (len(parts) >= 3 and parts[-3] == "results")):
        return parts[-2]
    return folder


def baseline_grid(benchmarks: Sequence[Mapping[str, Any]], baseline: str) -> dict[str, Any]:
    """Mila-style grid from `report.build(...).benchmarks`: speed-up vs `baseline` per benchmark + geomean.

    `baseline` names a row (system or job), a group folder, or a run id (its group's row is used).
    Each cell is `baseline_minutes / row_minutes` (baseline = 1.00, > 1 faster).
    """
    rows: dict[str, dict[str, float | None]] = {}
    runs: dict[str, dict[str, list[float]]] = {}
    for b in benchmarks:
        folder = str(b.get("folder") or "")
        bench = str(b.get("benchmark") or folder)
        row = row_of(folder, bench)
        rows.setdefault(row, {})[bench] = b.get("score_minutes")
        factor = b.get("scaling_factor") or 1.0
        runs.setdefault(row, {})[bench] = [m * factor for m in b.get("run_minutes") or ()]
    base = _resolve_baseline(baseline, rows, benchmarks)
    if base is None:
        known = ", ".join(sorted(rows)) or "none"
        return {"baseline": baseline, "error": f"baseline {baseline!r} matches no run, job or system (rows: {known})",
                "benchmarks": [], "rows": []}
    names = sorted({bench for cells in rows.values() for bench in cells})
    ref = rows[base]
    grid_rows = []
    for row in sorted(rows, key=lambda r: (r != base, r)):
        cells = {bench: _ratio(ref.get(bench), rows[row].get(bench)) for bench in names}
        present = [r for r in cells.values() if r is not None and r > 0]
        geomean = math.exp(math.fsum(math.log(r) for r in present) / len(present)) if present else None
        tests = {bench: welch(runs[base].get(bench, []), runs[row].get(bench, [])) if row != base else None
                 for bench in names}
        grid_rows.append({"row": row, "minutes": {b: rows[row].get(b) for b in names}, "ratio": cells,
                          "geomean": geomean,
                          "ci95": {b: [w.low, w.high] if w else None for b, w in tests.items()},
                          "significant": {b: w.significant if w else None for b, w in tests.items()}})
    return {"baseline": base, "benchmarks": names, "rows": grid_rows, "ci_method": METHOD}


def _resolve_baseline(name: str, rows: Mapping[str, Any], benchmarks: Sequence[Mapping[str, Any]]) -> str | None:
    if name in rows:
        return name
    for b in benchmarks:
        folder = str(b.get("folder") or "")
        if name == folder or folder.endswith("/" + name) or group_of_id(name) == folder:
            return row_of(folder, str(b.get("benchmark") or ""))
    return None


def render_grid(grid: Mapping[str, Any]) -> str:
    if grid.get("error"):
        return str(grid["error"])
    names: list[str] = list(grid["benchmarks"])
    head = ["row", *names, "geomean"]
    body = [[r["row"], *(_grid_cell(r, b) for b in names), fmt_x(r["geomean"])] for r in grid["rows"]]
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(head)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return (f"speed-up vs baseline {grid['baseline']} (time-to-train, baseline = 1.00×; [95% interval, "
            f"{grid.get('ci_method', METHOD)}], * significant)\n" + "\n".join(lines))


def _grid_cell(row: Mapping[str, Any], bench: str) -> str:
    text = fmt_x(row["ratio"][bench])
    ci = (row.get("ci95") or {}).get(bench)
    if ci:
        text += f" [{ci[0]:.2f}–{ci[1]:.2f}]" + ("*" if (row.get("significant") or {}).get(bench) else "")
    return text


# ---- Mila-style per-run report -------------------------------------------------------------------------------
def mila_run_report(view: RunView, *, discard: int | None = None, host: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One run as the Mila suite's per-run JSON: train_item statistics after discarding warm-up."""
    from perfwatch.core.measure import throughput as metrics

    stats = metrics.train_item_stats(view) if discard is None else metrics.train_item_stats(view, discard)
    p = view.params
    ttt = view.time_to_train_ms
    host = host or {}
    return {
        "name": view.run_id,
        "benchmark": view.benchmark,
        "batch_size": view.global_batch_size,
        "devices": view.world_size or 1,
        "gpu": p.get(keys.DEVICE),
        "hostname": host.get("hostname"),
        "cpu_cores": host.get("cpu_cores"),
        "seed": view.seed,
        "precision": view.precision,
        "status": view.run_status,
        "train": {"time_to_train": ttt / 1000.0 if ttt is not None else None, "unit": "s"},
        "train_item": {"avg": stats.avg, "min": stats.min, "max": stats.max, "sd": stats.sd,
                       "range": stats.range, "count": stats.count, "discarded": stats.discarded,
                       "unit": stats.unit},
        "metrics": {"best_eval": view.best_eval, "last_eval": view.last_eval,
                    "target_reached": view.target_reached},
        "unique_id": hashlib.sha256(f"{view.path}\0{view.first_time_ms}".encode()).hexdigest(),
    }
