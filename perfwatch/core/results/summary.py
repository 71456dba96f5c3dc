"""`perfwatch report`: per-run results and per-benchmark olympic scores, rendered four ways.

The JSON form is the stable one (documented in docs/report.md); table, markdown and csv
are renderings of the same rows. In a perfwatch LOGDIR every run of its perfwatch.json is a row,
those that never logged a record too (queued, crashed at start-up, never started), with the state
the live view shows (core/model/status.py), read without taking the campaign over.
"""

from __future__ import annotations

import io
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from perfwatch.core.ingest.sanitize import csv_cell, json_text, one_line
from perfwatch.core.layout import is_result_name, without_repeat
from perfwatch.core.measure.throughput import samples_rate
from perfwatch.core.mlperf import rcp
from perfwatch.core.mlperf.scores import (
    MS_PER_MINUTE,
    BenchmarkScore,
    EnergyScore,
    ScalingError,
    energy_score,
    scaling_factor,
    score_runs,
)
from perfwatch.core.model.book import RunBook
from perfwatch.core.model.run import RunView
from perfwatch.core.model.status import Counts, RunStatus, count, judge

if TYPE_CHECKING:
    from perfwatch.core.control.states import RunState
    from perfwatch.core.mlperf.rulesets import StandsFor
    from perfwatch.core.mlperf.targets import Target
    from perfwatch.core.model.attempts import Attempt


class RecordedRun(msgspec.Struct, frozen=True):
    """A run of a perfwatch LOGDIR as its perfwatch.json (and, for a run that ended while no scheduler
    watched, its exit.json) tells it: the process facts `judge` reads, as the live view has them."""

    run_id: str
    state: RunState
    exit_code: int | None
    reason: str | None
    stalled: bool
    attempt: int
    target: Target | None
    earlier: tuple[Attempt, ...]


def campaign_plan(root: Path) -> tuple[dict[str, StandsFor], dict[str, Target]]:
    """A campaign LOGDIR's `mlperf:` per run (so its RCP verdict is judged as that benchmark) and target per
    run (what the live view judges "reached" against), from perfwatch.json; empty for other folders."""
    from perfwatch.core.layout import REGISTRY_FILE

    if not (Path(root) / REGISTRY_FILE).is_file():
        return {}, {}  # not a campaign's LOGDIR: nothing to import or read (report stays fast)
    from perfwatch.core.control import registry

    data = registry.read(Path(root))
    return (data.stand_ins(), data.targets()) if data is not None else ({}, {})


def recorded_runs(root: Path, *, attempts: bool = True) -> dict[str, RecordedRun]:
    """Every run planned in `root`/perfwatch.json, in plan order; {} for a folder that has none.
    `attempts`: also read each restarted run's earlier attempts back (their kept logs)."""
    from perfwatch.core.layout import REGISTRY_FILE

    if not (root / REGISTRY_FILE).is_file():
        return {}  # not a campaign's LOGDIR: nothing to import or read (report stays fast)
    from perfwatch.core.control import process, registry
    from perfwatch.core.control.paths import UnsafePath, run_folder
    from perfwatch.core.control.scheduler import exit_state
    from perfwatch.core.model.attempts import earlier_attempts

    data = registry.read(root)
    if data is None:
        return {}
    owner = data.scheduler
    watched = owner is not None and process.same_process(owner.pid, owner.create_time)
    out = {}
    for rec in data.runs:
        try:
            folder = run_folder(root, rec.run_id)
        except UnsafePath:
            continue  # never read outside LOGDIR
        state, code, reason = rec.state, rec.exit_code, rec.reason
        if state.alive and not watched and not (rec.pid and rec.create_time is not None
                                                and process.same_process(rec.pid, rec.create_time)):
            # it ended while no scheduler watched: what its exit record says, as a take-over would read it
            ended = process.read_exit(folder)
            code, unknown = _exit_code(ended)
            state, reason = exit_state(code if code is not None else -9, unknown=code is None, intent=rec.intent,
                                       reason=rec.reason, cache_clear=(ended or {}).get("cache_clear"))
        earlier = earlier_attempts(folder, rec.run_id, rec.attempts, rec.target) if attempts else ()
        out[rec.run_id] = RecordedRun(rec.run_id, state, code, reason, rec.stalled, rec.attempt, rec.target, earlier)
    return out


def _exit_code(record: Mapping[str, Any] | None) -> tuple[int | None, bool]:
    """(exit status, -SIG when signalled; None: the record says nothing) from an exit.json."""
    import signal

    if record is None:
        return None, True
    sig = record.get("signal")
    if isinstance(sig, str) and sig in signal.Signals.__members__:
        return -int(signal.Signals[sig]), False
    code = record.get("exit_code")
    return (code, False) if isinstance(code, int) and not isinstance(code, bool) else (None, True)


def status_of(view: RunView | None, recorded: RecordedRun | None = None) -> RunStatus:
    """The run's state, reason and verdict by the one rule every front end uses (core/model/status.py)."""
    return judge(view, recorded, recorded.target if recorded is not None else None, now_ms=time.time() * 1000.0)


def group_of(view: RunView) -> str:
    """Runs that form one score: a results folder, or the repeats of one launched configuration."""
    return group_of_id(view.run_id)


def group_of_id(run_id: str) -> str:
    """`group_of` for a bare run id: `.../result_N` -> its folder ("." at the top), `job.cfg.rN` -> `job.cfg`."""
    folder, _, name = run_id.rpartition("/")
    if is_result_name(name):
        return folder or "."
    return without_repeat(run_id)


def group_dir(members: list[RunView]) -> Path | None:
    """The results folder on disk holding a group's `result_N.txt` files (where scaling.json lives)."""
    parents = {os.path.dirname(v.path) for v in members}
    if len(parents) != 1 or not all(is_result_name(Path(v.path).stem) for v in members):
        return None
    return Path(parents.pop())


def score_group(members: list[RunView]) -> BenchmarkScore:
    """The official score of one run group: olympic mean × its folder's scaling.json factor."""
    bench = next((v.benchmark for v in members if v.benchmark), None)
    runs = [(v.run_id, v.time_to_train_ms / MS_PER_MINUTE if v.converged and v.time_to_train_ms else None)
            for v in members]
    try:
        factor = scaling_factor(group_dir(members))
    except ScalingError as exc:
        scored = score_runs(bench, runs)
        return BenchmarkScore(bench, scored.runs, scored.converged, None, scored.dropped,
                              f"{exc}: no score (MLPerf's summarizer cannot read it either)",
                              float("nan"), scored.olympic_minutes)
    return score_runs(bench, runs, factor)


class GroupEnergy(msgspec.Struct, frozen=True):
    """A results folder's MLPerf power logs: each run's energy-to-train and the folder's energy score."""

    runs: dict[str, Any]  # run id -> power.RunPower
    score: EnergyScore


def energy_group(members: list[RunView], scored: BenchmarkScore) -> GroupEnergy | None:
    """Energy from the MLPerf power logs of a results folder (None: the folder has no `power/`).

    Per run: joules for every run with a time-to-train; the score: `scores.energy_score` over the runs
    the time score counts, with the same scaling.json factor. Where the summarizer could not compute it,
    the score's note names the run and why."""
    folder = group_dir(members)
    if folder is None:
        return None
    from perfwatch.core.mlperf import power

    if not power.has_power(folder):
        return None
    per_run = {v.run_id: power.run_power(v.path, v.time_to_train_ms) for v in members}
    counted = [(v.run_id, minutes_of(v), per_run[v.run_id].joules) for v in members]
    factor = scored.scaling_factor if math.isfinite(scored.scaling_factor) else 1.0
    score = energy_score(scored.benchmark, counted, factor)
    problems = [str(per_run[v.run_id].problem) for v in members
                if minutes_of(v) is not None and per_run[v.run_id].problem]
    if problems:
        more = f" (and {len(problems) - 1} more run(s))" if len(problems) > 1 else ""
        score = msgspec.structs.replace(score, note=f"no energy score: {problems[0]}{more}")
    elif not math.isfinite(scored.scaling_factor):
        score = msgspec.structs.replace(score, joules=None, note="no energy score: scaling.json unreadable")
    return GroupEnergy(per_run, score)


def minutes_of(view: RunView) -> float | None:
    """A run's time-to-train in minutes as the scores count it (None: it did not converge)."""
    ttt = view.time_to_train_ms
    return ttt / MS_PER_MINUTE if view.converged and ttt else None


def refused_files(members: list[RunView]) -> list[str]:
    """Why some runs' files are not handed to mlperf_logging's code (lines that carry :::MLLOG and do not
    parse: `mlperf.bounded`), from what reading them found."""
    bad = [v for v in members if v.bad_count]
    if not bad:
        return []
    from perfwatch.core.mlperf.bounded import refusal

    return [why for v in bad if (why := refusal(v.path, v.bad_count, v.bad_lines[0] if v.bad_lines else None))]


def group_ruleset(members: list[RunView]) -> tuple[str | None, str]:
    """The ruleset of a group's runs and why; says so when its runs disagree."""
    seen = {(v.ruleset, v.ruleset_why) for v in members if v.ruleset}
    rulesets = {rs for rs, _ in seen}
    if not rulesets:
        return None, "unknown: no run named its benchmark"
    if len(rulesets) > 1:
        return None, "runs judged under different rulesets: " + ", ".join(sorted(str(r) for r in rulesets))
    rs = rulesets.pop()
    whys = sorted({why for _, why in seen})
    return rs, whys[0] if len(whys) == 1 else "; ".join(whys)


def run_row(view: RunView, root: Path, extra: Callable[[RunView], dict[str, Any]] | None = None,
            recorded: RecordedRun | None = None) -> dict[str, Any]:
    try:
        rel = Path(view.path).relative_to(root).as_posix()
    except ValueError:
        rel = view.path
    ttt = view.time_to_train_ms
    stats = view.throughput_stats
    status = status_of(view, recorded)
    row: dict[str, Any] = {
        "path": rel,
        "run_id": view.run_id,
        "benchmark": view.benchmark,
        **_status_columns(status, recorded),
        "run_stop_status": view.run_status,
        "target_reached": view.target_reached if view.target is not None else None,
        "converged": view.converged,
        "time_to_train_ms": ttt,
        "time_to_train_min": ttt / MS_PER_MINUTE if ttt is not None else None,
        "target": view.target.describe() if view.target else None,
        "ruleset": view.ruleset,
        "ruleset_why": view.ruleset_why,
        "best_eval": view.best_eval,
        "evals": len(view.evals),
        "rate_unit": view.count_unit,  # what throughput_* and rate_window count per second
        "throughput_mean": view.throughput_avg,  # weighed by the time each rate covers (model/progress.py)
        "samples_per_s_mean": samples_rate(view, view.throughput_avg),
        "throughput_min": stats.min if stats.count else None,
        "throughput_max": stats.max if stats.count else None,
        "throughput_source": view.throughput_source,
        "seed": view.seed,
        "global_batch_size": view.global_batch_size,
        "bad_lines": view.bad_count,
        "compliance": None if view.compliance_ok is None else ("pass" if view.compliance_ok else "fail"),
        "findings": [f"{f.severity}: {f.message}" for f in view.findings][:20],
    }
    if extra is not None:
        row.update(extra(view))
    return row


def _status_columns(status: RunStatus, recorded: RecordedRun | None) -> dict[str, Any]:
    return {
        "status": status.word,  # the state word (core/model/status.py), as the live view shows it
        "reason": status.reason or None,
        "target_verdict": status.verdict.value,
        "failed": status.failed,
        "attempt": recorded.attempt if recorded is not None else None,
        "earlier_attempts": [msgspec.to_builtins(a) for a in recorded.earlier] if recorded is not None else [],
    }


def planned_row(recorded: RecordedRun) -> dict[str, Any]:
    """A run of perfwatch.json that logged nothing (queued, never started, crashed before its first record)."""
    status = status_of(None, recorded)
    return {"path": None, "run_id": recorded.run_id, "benchmark": None, **_status_columns(status, recorded),
            "target": recorded.target.describe() if recorded.target else None}


class Report(msgspec.Struct, frozen=True):
    runs: list[dict[str, Any]]
    benchmarks: list[dict[str, Any]]
    counts: Counts | None = None  # every run's status added up (core/model/status.py)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runs": self.runs, "benchmarks": self.benchmarks}
        if self.counts is not None:
            out["counts"] = {**msgspec.to_builtins(self.counts), "verdicts": self.counts.verdicts}
        return out


def build(book: RunBook, extra: Callable[[RunView], dict[str, Any]] | None = None,
          recorded: Mapping[str, RecordedRun] | None = None) -> Report:
    """Rows for every run (`recorded`: a campaign's perfwatch.json runs, `recorded_runs`) and the scores."""
    recorded = recorded or {}
    views = book.views()
    rows = [run_row(v, book.root, extra, recorded.get(v.run_id)) for v in views]
    seen = {v.run_id for v in views}
    rows += [planned_row(r) for rid, r in recorded.items() if rid not in seen]
    statuses = [status_of(v, recorded.get(v.run_id)) for v in views]
    statuses += [status_of(None, r) for rid, r in recorded.items() if rid not in seen]
    row_of_run = {r["run_id"]: r for r in rows}
    groups: dict[str, list[RunView]] = {}
    for v in views:
        groups.setdefault(group_of(v), []).append(v)
    benches: list[dict[str, Any]] = []
    for folder, members in groups.items():
        scored = score_group(members)
        ruleset, why = group_ruleset(members)
        from perfwatch.core.mlperf.tree import division_of

        folder_path = os.path.dirname(members[0].path) if members[0].path else None
        division_said = division_of(folder_path if group_dir(members) is not None else None,
                                    next((v.division for v in members if v.division), None))
        division = division_said.division
        stand_in = next((v.stands_for for v in members if v.stands_for is not None), None)
        refused = refused_files(members)
        if stand_in is None:
            verdict = rcp.folder_verdict([v.path for v in members], scored.benchmark, ruleset, division,
                                         refused=refused)
        else:  # a campaign's job standing in for an MLPerf benchmark (its `mlperf:`), its logs naming none
            verdict = rcp.folder_verdict([v.path for v in members], stand_in.benchmark, stand_in.ruleset,
                                         stand_in.division, as_benchmark=True, refused=refused)
        energy = energy_group(members, scored)
        benches.append(
            {
                "folder": folder,
                "benchmark": scored.benchmark,
                "runs": scored.runs,
                "converged": scored.converged,
                "dropped": list(scored.dropped),
                "run_minutes": sorted(v.time_to_train_ms / MS_PER_MINUTE for v in members
                                      if v.converged and v.time_to_train_ms),
                "olympic_minutes": scored.olympic_minutes,
                "scaling_factor": scored.scaling_factor if math.isfinite(scored.scaling_factor) else None,
                "score_minutes": scored.score_minutes,
                "ruleset": ruleset,
                "ruleset_why": why,
                "division": division,
                "division_source": division_said.source,
                "rcp": verdict.to_json(),
                "stands_for": msgspec.to_builtins(stand_in) if stand_in is not None else None,
                "note": scored.note,
                **_energy_columns(energy),
            }
        )
        for v in members:  # the run-level forms (csv) say which scaling their folder's score carries
            row = row_of_run[v.run_id]
            row["group"] = folder
            row["scaling_factor"] = benches[-1]["scaling_factor"]
            if energy is not None:
                got = energy.runs[v.run_id]
                row["mlperf_energy_j"] = got.joules
                row["mlperf_energy_note"] = got.problem
                row["group_energy_score_j"] = energy.score.joules
    return Report(rows, benches, count(statuses))


def _energy_columns(energy: GroupEnergy | None) -> dict[str, Any]:
    """A benchmark row's energy score from MLPerf power logs (all None for a folder without `power/`)."""
    if energy is None:
        return {"energy_score_j": None, "energy_olympic_j": None, "energy_source": None, "energy_note": None}
    from perfwatch.core.mlperf.power import SOURCE

    score = energy.score
    return {"energy_score_j": score.joules, "energy_olympic_j": score.olympic_joules, "energy_source": SOURCE,
            "energy_note": score.note or None}


def metrics_columns(*, measure_cpu_peak: bool = True, logdir: Path | str | None = None,
                    telemetry_of: Callable[[RunView], Any] | None = None) -> Callable[[RunView], dict[str, Any]]:
    """Throughput-now, MFU and telemetry columns (measure/columns.py), MFU against THE peak resolver's peak.

    CPU runs use the host peak stored by `perfwatch peak --measure` (measure/host_peak.py). Nothing
    here measures or imports torch: `measure_cpu_peak=False` (report --no-cpu-peak) leaves the stored
    peak out too.
    `logdir`: a campaign's LOGDIR, whose perfwatch.json may set flops_per_sample / peak_flops per run.
    `telemetry_of`: a run's telemetry already gathered (`columns.LiveTelemetry`, the metrics endpoint),
    else telemetry.jsonl is read in one streaming pass.
    """
    from perfwatch.core.measure import columns, mfu

    cpu: mfu.CpuPeakPolicy = "cached" if measure_cpu_peak else "off"
    overrides = mfu.overrides_from_registry(logdir) if logdir is not None else {}

    def extra(view: RunView) -> dict[str, Any]:
        return columns.report_extra(view, cpu=cpu, overrides=overrides.get(view.run_id),
                                    telemetry=telemetry_of(view) if telemetry_of is not None else None)

    return extra


# ---- renderers ------------------------------------------------------------------

def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        return f"{value:,.{digits}f}"
    return str(value)


RUN_COLUMNS: list[tuple[str, str, int]] = [
    ("run_id", "run", 0),
    ("benchmark", "benchmark", 0),
    ("status", "state", 0),
    ("target_verdict", "target", 0),
    ("time_to_train_min", "TTT min", 3),
    ("best_eval", "best eval", 4),
    ("throughput_mean", "avg/s", 1),  # in rate_unit: samples, or tokens where the benchmark counts tokens
    ("rate_window", "now/s", 1),
    ("rate_unit", "unit", 0),
    ("mfu", "MFU", 1),
    ("cpu_mean", "CPU %", 0),
    ("gpu_util_mean", "GPU %", 0),
    ("power_mean_w", "W", 0),
    ("energy_to_train_kj", "kJ", 2),  # GPU energy-to-train; how it was measured: energy_lines
    ("mlperf_energy_j", "power-log J", 0),  # MLPerf power logs' energy-to-train (shown when a run has one)
    ("compliance", "rules", 0),
    ("bad_lines", "bad", 0),
]
BENCH_COLUMNS: list[tuple[str, str, int]] = [
    ("folder", "folder", 0),
    ("benchmark", "benchmark", 0),
    ("runs", "runs", 0),
    ("converged", "ok", 0),
    ("olympic_minutes", "olympic min", 3),
    ("scaling_factor", "scaling", 4),
    ("score_minutes", "score min", 3),
    ("energy_score_j", "energy score J", 0),  # from MLPerf power logs (shown when a folder has them)
    ("ruleset", "ruleset", 0),
    ("rcp_text", "RCP", 0),
    ("note", "note", 0),
]


_FRACTIONS_AS_PERCENT = frozenset({"mfu"})  # JSON keeps the fraction; tables show a percentage


def _cell(row: dict[str, Any], key: str, digits: int) -> str:
    if key == "rcp_text":
        stand_in = row.get("stands_for")
        judged = f" as {stand_in.get('benchmark')}" if isinstance(stand_in, dict) else ""
        return rcp_text(row.get("rcp")) + judged
    value = row.get(key)
    if key in _FRACTIONS_AS_PERCENT and isinstance(value, float):
        return f"{value * 100:.{digits}f}%"
    return _fmt(value, digits)


def rcp_text(verdict: Any) -> str:
    """`pass`, `pass ×1.0123`, `fail`, `n/a` for a table cell."""
    if not isinstance(verdict, dict):
        return "—"
    text = str(verdict.get("verdict"))
    norm = verdict.get("normalization")
    if text == "pass" and isinstance(norm, float) and norm > 1.0:
        text += f" ×{norm:.4f}"
    return text


def cells(rows: list[dict[str, Any]], columns: list[tuple[str, str, int]]) -> list[list[str]]:
    """Each row as the texts the table renderers show (text, markdown, HTML): one line per cell, whatever
    a name holds (a newline in a benchmark or file name never forges a row)."""
    return [[one_line(_cell(r, k, d)) for k, _, d in columns] for r in rows]


def _has_power_logs(row: dict[str, Any]) -> bool:
    """A run of a folder with MLPerf power logs (its row has the key), or such a folder's row."""
    return "mlperf_energy_j" in row or bool(row.get("energy_source"))


_POWER_LOG_COLUMNS = ("mlperf_energy_j", "energy_score_j")  # most trees have no power logs: no empty column


def shown_columns(rows: list[dict[str, Any]], columns: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The columns a table shows: the power-log energy ones only when some row has a power measurement."""
    if any(_has_power_logs(r) for r in rows):
        return columns
    return [c for c in columns if c[0] not in _POWER_LOG_COLUMNS]


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str, int]]) -> str:
    columns = shown_columns(rows, columns)
    head = [h for _, h, _ in columns]
    body = cells(rows, columns)
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(head)]
    numeric = [d > 0 or k in ("runs", "converged", "bad_lines") for k, _, d in columns]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric, strict=True)).rstrip()

    out = [line(head), line(["-" * w for w in widths])]
    out += [line(r) for r in body]
    return "\n".join(out)


def _markdown(rows: list[dict[str, Any]], columns: list[tuple[str, str, int]]) -> str:
    columns = shown_columns(rows, columns)
    head = [h for _, h, _ in columns]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in cells(rows, columns)]
    return "\n".join(out)


def render(report: Report, fmt: str) -> str:
    if fmt == "json":
        return json_text(report.as_dict())
    if fmt == "csv":
        import csv

        buf = io.StringIO()
        keys = list(dict.fromkeys(k for r in report.runs for k in r)) if report.runs else [k for k, _, _ in RUN_COLUMNS]
        writer = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
        writer.writerow({k: csv_cell(k) for k in keys})
        for row in report.runs:
            writer.writerow({k: csv_cell(v) for k, v in row.items()})
        return buf.getvalue().rstrip("\n")
    if fmt == "markdown":
        return (
            "## Runs\n\n" + _markdown(report.runs, RUN_COLUMNS)
            + "\n\n## Benchmarks\n\n" + _markdown(report.benchmarks, BENCH_COLUMNS)
            + "\n\n" + "\n".join(f"- {line}" for line in _notes(report))
        )
    return "RUNS\n" + _table(report.runs, RUN_COLUMNS) + "\n" + counts_line(report) + "\n\nBENCHMARKS (olympic time-to-train)\n" + _table(
        report.benchmarks, BENCH_COLUMNS
    ) + "\n" + "\n".join(_notes(report))


def counts_line(report: Report) -> str:
    """"5 runs: 3 done, 1 killed, 1 crashed; target: 2 reached, 3 no target; 2 failed" (the TUI's header counts)."""
    c = report.counts
    if c is None:
        return ""
    states = ", ".join(f"{n} {s}" for s, n in c.states.items())
    return f"{c.runs} runs: {states}; target: {c.target_text() or 'none'}; {c.failed} failed"


def reasons_lines(report: Report) -> list[str]:
    """Why each run that is not simply done is in its state."""
    return [f"{r['run_id']}: {r['status']}: {r['reason']}" for r in report.runs if r.get("reason")]


def _notes(report: Report) -> list[str]:
    lines = (reasons_lines(report) + ruleset_lines(report) + peak_lines(report) + energy_lines(report)
             + power_log_lines(report) + node_lines(report) + time_lines(report))
    return [one_line(n) for n in lines]


def power_log_lines(report: Report) -> list[str]:
    """How the power-log joules were measured, and each folder whose energy score cannot be computed."""
    with_power = [b for b in report.benchmarks if b.get("energy_source")]
    if not with_power:
        return []
    where = with_power[0]["folder"] if len(with_power) == 1 else f"{len(with_power)} folders"
    out = [f"power-log J of {where}: energy-to-train from the MLPerf power logs (power/<result>/node_*.txt, "
           "sw_*.txt) as MLCommons' result summarizer computes it; energy score: olympic mean, runs ranked by "
           "time-to-train, × scaling.json"]
    out += [f"{b['folder']}: {b['energy_note']}" for b in with_power
            if b.get("energy_score_j") is None and b.get("energy_note")]
    return out


def node_lines(report: Report) -> list[str]:
    """Runs sampled on several compute nodes (Slurm): each node's figures behind the row's totals."""
    out = []
    for r in report.runs:
        nodes = r.get("telemetry_nodes")
        if not isinstance(nodes, dict):
            continue
        parts = []
        for node, n in nodes.items():
            figures = [f"CPU {_fmt(n.get('cpu_mean'), 0)} %", f"GPU {_fmt(n.get('gpu_util_mean'), 0)} %",
                       f"{_fmt(n.get('power_mean_w'), 0)} W", f"{n.get('samples')} samples"]
            parts.append(f"{node}: {', '.join(figures)}")
        out.append(f"telemetry of {r['run_id']} by node (the row adds them up): {'; '.join(parts)}")
    return out


def energy_lines(report: Report) -> list[str]:
    """How each kJ was measured (measure/energy.py says it), one line per distinct method."""
    methods = _runs_by(report, "energy_to_train_kj", "energy_method")
    if not methods:
        return []  # no run has energy (a results tree): the energy integrator is not imported
    from perfwatch.core.measure.energy import how

    return [f"kJ of {runs}: GPU energy from run_start to run_stop, {how(method)}" for method, runs in methods.items()]


def time_lines(report: Report) -> list[str]:
    """Runs whose time-to-train cannot be right as logged (negative): scored, but said out loud."""
    return [f"{r['run_id']}: {f}" for r in report.runs for f in r.get("findings") or ()
            if "negative time-to-train" in f]


def peak_lines(report: Report) -> list[str]:
    """Which peak each MFU was measured against (measure/mfu.py says it), one line per distinct peak."""
    return [f"MFU of {runs} against {peak}" for peak, runs in _runs_by(report, "mfu", "peak_used").items()]


def _runs_by(report: Report, value: str, why: str) -> dict[str, str]:
    """Runs that have `value`, grouped by their `why` text: "run_id", or "N runs" when several."""
    by: dict[str, list[str]] = {}
    for r in report.runs:
        if r.get(value) is not None and r.get(why):
            by.setdefault(str(r[why]), []).append(str(r["run_id"]))
    return {k: runs[0] if len(runs) == 1 else f"{len(runs)} runs" for k, runs in by.items()}


def ruleset_lines(report: Report) -> list[str]:
    """Which ruleset judged each benchmark folder and why, one line per distinct reason."""
    by_reason: dict[tuple[str, str], list[str]] = {}
    for b in report.benchmarks:
        by_reason.setdefault((str(b.get("ruleset") or "—"), str(b.get("ruleset_why") or "")), []).append(
            str(b.get("folder")))
    out = []
    for (rs, why), folders in by_reason.items():
        where = folders[0] if len(folders) == 1 else f"{len(folders)} folders"
        out.append(f"ruleset {rs} for {where}: {why}")
    return out
