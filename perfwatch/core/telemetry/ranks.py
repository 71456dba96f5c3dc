"""Inside a distributed run: per-rank step timing, the straggler and why, and the hang watchdog's verdict.

Reads the rank files that `perfwatch.instrument.ranks.RankTimer` writes (`<run>/ranks/rank_<N>.jsonl`,
format in that module) and, for GPU runs, the run's telemetry (clock-event reasons, SM clocks per GPU).

Straggler: in synchronous data parallelism every rank's step takes as long as the slowest rank's, so
step times alone cannot name it. What differs is where the time goes: the ranks that wait for a slow
peer spend it in collectives. A rank's *busy* time is the time it is not waiting in a collective; the
straggler is the rank whose busy time is the highest, when it exceeds the median of the other ranks by
at least STRAGGLER_MIN_EXCESS. Its cause, in this order: its own data wait (a slow loader), its GPU's
clock-event reasons (power cap, thermal) or lower SM clock in the same minute, else its compute.

Hang watchdog: a run whose steps stop for longer than `factor` x its own recent step time (never less
than `floor_s`) is stalled; while an eval is running (a rank's heartbeat says so, or the log has an
eval_start without its eval_stop) the limit is `factor` x the longest eval seen so far, or EVAL_FLOOR_S
before the first. The ranks that are not waiting in a collective are the stuck ones.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfwatch.core import layout
from perfwatch.core.ingest.sanitize import finite

__all__ = [
    "DEFAULT_STALL_FACTOR", "RankFile", "RankStats", "StallVerdict", "Straggler", "WINDOW_S",
    "find_straggler", "judge_stall", "rank_stats", "read_rank_files", "stuck_ranks",
]

WINDOW_S = 60.0  # "now" statistics cover the last minute of records
STRAGGLER_MIN_EXCESS = 0.10  # busy time >= 110 % of the other ranks' median
DATA_CAUSE_SHARE = 0.10  # data wait >= 10 % of the span ...
# ... and its extra data wait >= a quarter of its extra busy time (a late rank also waits less in the
# collectives it reaches last, so the busy excess is about twice the delay that caused it)
DATA_CAUSE_PART = 0.25
THROTTLE_CAUSE_SHARE = 0.20  # a clock-event reason active in >= 20 % of the minute's samples
CLOCK_CAUSE_RATIO = 0.90  # SM clock <= 90 % of the other GPUs' median
DEFAULT_STALL_FACTOR = 10.0
STALL_FLOOR_S = 30.0
EVAL_FLOOR_S = 300.0
# a rank file is read from its last MiB (its header line from the start): the last minute of records is a few
# hundred KiB, and the campaign owner reads every live rank file every 2 s
MAX_RANK_FILE_BYTES = 1 << 20

# NVML clock-event reason -> words (the ones that slow a GPU down; idle and app clocks are not causes)
SLOWDOWN_REASONS = {
    "sw_power_cap": "power-capped",
    "hw_power_brake_slowdown": "power-brake slowed",
    "sw_thermal_slowdown": "thermally throttled",
    "hw_thermal_slowdown": "thermally throttled (hardware)",
    "hw_slowdown": "hardware-slowed",
}


@dataclass
class RankFile:
    """One rank file, parsed: who the rank is and its records in order."""

    rank: int
    info: dict[str, Any] = field(default_factory=dict)
    windows: list[dict[str, Any]] = field(default_factory=list)  # "steps" records
    beats: list[dict[str, Any]] = field(default_factory=list)
    ended: float | None = None
    bad_lines: int = 0


def _read_tail(path: Path) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - MAX_RANK_FILE_BYTES))
        data = fh.read()
    if size > MAX_RANK_FILE_BYTES:  # the first line may be cut: drop it, keep the header from the start
        with open(path, "rb") as fh:
            head = fh.readline(1 << 16)
        data = head + data.partition(b"\n")[2]
    return data


def read_rank_files(run_folder: Path | str) -> list[RankFile]:
    """Every rank file of a run, in rank order (none: an empty list)."""
    folder = Path(run_folder) / layout.RANKS_DIR
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError:
        return []
    out = []
    for name in names:
        rank = layout.rank_of_file(name)
        if rank is None:
            continue
        rf = RankFile(rank)
        try:
            data = _read_tail(folder / name)
        except OSError:
            continue
        for line in data.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                rf.bad_lines += 1
                continue
            if not isinstance(rec, dict) or finite(rec.get("t")) is None:
                rf.bad_lines += 1
                continue
            kind = rec.get("kind")
            if kind == "steps":
                rf.windows.append(rec)
            elif kind == "beat":
                rf.beats.append(rec)
            elif kind == "rank":
                rf.info = rec
            elif kind == "end":
                rf.ended = float(rec["t"])
        out.append(rf)
    return sorted(out, key=lambda r: r.rank)


def _num(rec: Mapping[str, Any], key: str) -> float:
    """A non-negative amount of a record (seconds), 0 when absent or not a number."""
    return finite(rec.get(key), 0.0) or 0.0


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class RankStats:
    """What the rank view shows for one rank."""

    rank: int
    node: str | None
    local_rank: int | None
    device: str | None
    gpu: int | None
    gpu_uuid: str | None
    pid: int | None
    steps: int
    step_now_s: float | None  # mean step time of the last window
    step_median_s: float | None  # over the last WINDOW_S
    step_p95_s: float | None
    data_share: float | None  # of the last WINDOW_S of training
    collective_share: float | None
    busy_s: float | None  # seconds not waiting in a collective, last WINDOW_S
    span_s: float | None
    phase: str | None  # the last heartbeat's
    phase_since: float | None  # wall time
    collective_since: float | None  # wall time of its oldest unfinished collective
    last_seen: float | None  # wall time of its last record
    last_progress: float | None  # wall time its step count last grew
    ended: bool


def _last_progress(rf: RankFile) -> float | None:
    """When the rank's step count last grew (step windows and heartbeats both carry it)."""
    points = sorted([(float(r["t"]), int(r.get("steps") or 0)) for r in rf.windows + rf.beats
                     if isinstance(r.get("steps"), int)])
    best: float | None = None
    prev = -1
    for t, steps in points:
        if steps > prev:
            best, prev = t, steps
    return best


def rank_stats(files: Iterable[RankFile], now: float | None = None, window_s: float = WINDOW_S) -> list[RankStats]:
    out = []
    for rf in files:
        last_seen = max([float(r["t"]) for r in rf.windows + rf.beats] + ([rf.ended] if rf.ended else []),
                        default=None)
        end = now if now is not None else last_seen
        recent = [w for w in rf.windows if end is None or float(w["t"]) >= end - window_s] or rf.windows[-1:]
        durations = sorted(d for w in recent for x in w.get("step_s") or () if (d := finite(x, 0.0)) is not None)
        span = sum(_num(w, "span_s") for w in recent)
        coll = min(sum(_num(w, "coll_s") for w in recent), span) if span else 0.0
        data = min(sum(_num(w, "data_s") for w in recent), span) if span else 0.0
        last = rf.windows[-1] if rf.windows else None
        last_d = [d for x in (last.get("step_s") or ()) if (d := finite(x, 0.0)) is not None] if last else []
        beat = rf.beats[-1] if rf.beats else None
        info = rf.info
        out.append(RankStats(
            rank=rf.rank,
            node=info.get("node") if isinstance(info.get("node"), str) else None,
            local_rank=info.get("local_rank") if isinstance(info.get("local_rank"), int) else None,
            device=info.get("device") if isinstance(info.get("device"), str) else None,
            gpu=info.get("gpu") if isinstance(info.get("gpu"), int) else None,
            gpu_uuid=info.get("gpu_uuid") if isinstance(info.get("gpu_uuid"), str) else None,
            pid=info.get("pid") if isinstance(info.get("pid"), int) else None,
            steps=max([int(r["steps"]) for r in rf.windows + rf.beats if isinstance(r.get("steps"), int)],
                      default=0),
            step_now_s=statistics.fmean(last_d) if last_d else None,
            step_median_s=_quantile(durations, 0.5) if durations else None,
            step_p95_s=_quantile(durations, 0.95) if durations else None,
            data_share=data / span if span else None,
            collective_share=coll / span if span else None,
            busy_s=span - coll if span else None,
            span_s=span or None,
            phase=beat.get("phase") if beat and isinstance(beat.get("phase"), str) else None,
            phase_since=finite(beat.get("since")) if beat else None,
            collective_since=finite(beat.get("collective_since")) if beat else None,
            last_seen=last_seen,
            last_progress=_last_progress(rf),
            ended=rf.ended is not None,
        ))
    return out


# ---- the straggler -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Straggler:
    rank: int
    excess: float  # busy time / the other ranks' median busy time - 1
    cause: str  # "waiting for data", "GPU 5 power-capped 40 % of the last minute", "compute"
    text: str  # one line for every front end


Telemetry = Iterable[Mapping[str, Any]] | Mapping[str, Iterable[Mapping[str, Any]]]


def _by_node(telemetry: Telemetry) -> Mapping[str, Iterable[Mapping[str, Any]]]:
    """Telemetry records by the node they were sampled on ("" for the run's own telemetry.jsonl)."""
    return telemetry if isinstance(telemetry, Mapping) else {"": telemetry}


def _gpu_minute(telemetry: Telemetry, now: float | None, window_s: float) -> dict[str, dict[str, Any]]:
    """Per GPU (its uuid, else "node|index"): share of samples per slowdown reason, median SM clock,
    mean utilisation and highest memory over the last `window_s`."""
    nodes = {node: [r for r in recs if finite(r.get("time")) is not None] for node, recs in _by_node(telemetry).items()}
    times = [float(r["time"]) for recs in nodes.values() for r in recs]
    if not times:
        return {}
    end = now if now is not None else max(times)
    counts: dict[str, dict[str, Any]] = {}
    for node, recs in nodes.items():
        for rec in recs:
            if float(rec["time"]) < end - window_s:
                continue
            for g in rec.get("gpus") or ():
                if not isinstance(g, dict):
                    continue
                key = str(g["uuid"]) if isinstance(g.get("uuid"), str) else f"{node}|{g.get('index')}"
                c = counts.setdefault(key, {"n": 0, "reasons": {}, "clocks": [], "utils": [], "mems": [],
                                            "index": g.get("index"), "node": node})
                c["n"] += 1
                if (v := finite(g.get("util_sm"))) is not None:
                    c["utils"].append(v)
                if (v := finite(g.get("mem_used"))) is not None:
                    c["mems"].append(v)
                if (v := finite(g.get("sm_clock"))) is not None:
                    c["clocks"].append(v)
                for r in g.get("throttle") or ():
                    if r in SLOWDOWN_REASONS:
                        c["reasons"][r] = c["reasons"].get(r, 0) + 1
    return {k: {"index": c["index"], "node": c["node"], "reasons": {r: n / c["n"] for r, n in c["reasons"].items()},
                "sm_clock": statistics.median(c["clocks"]) if c["clocks"] else None,
                "util": statistics.fmean(c["utils"]) if c["utils"] else None,
                "mem_used": max(c["mems"]) if c["mems"] else None}
            for k, c in counts.items() if c["n"]}


def _gpu_key(s: RankStats, gpus: Mapping[str, Any]) -> str | None:
    """The rank's GPU among `gpus`: by uuid, else by its index on its node's telemetry (a node file's
    name is the node's name made safe, and may be the short form of the rank's host name), else on the
    run's own telemetry."""
    if s.gpu_uuid and s.gpu_uuid in gpus:
        return s.gpu_uuid
    if s.gpu is None:
        return None
    host = s.node or ""
    names = [layout.telemetry_node(layout.node_telemetry_name(h)) for h in (host, host.split(".")[0]) if h]
    for node in [*names, ""]:
        for key, g in gpus.items():
            if g.get("node") == node and g.get("index") == s.gpu:
                return key
    return None


def find_straggler(stats: Sequence[RankStats], telemetry: Telemetry = (),
                   now: float | None = None, window_s: float = WINDOW_S) -> Straggler | None:
    """The rank the others wait for, with its likely cause; None when no rank stands out."""
    live = [s for s in stats if s.busy_s is not None and s.span_s]
    if len(live) < 2:
        return None
    worst = max(live, key=lambda s: s.busy_s or 0.0)
    others = [s.busy_s or 0.0 for s in live if s is not worst]
    base = statistics.median(others)
    if base <= 0 or (worst.busy_s or 0.0) < base * (1 + STRAGGLER_MIN_EXCESS):
        return None
    excess = (worst.busy_s or 0.0) / base - 1
    cause = _cause(worst, [s for s in live if s is not worst], _gpu_minute(telemetry, now, window_s))
    return Straggler(worst.rank, excess, cause,
                     f"rank {worst.rank}: busy +{excess * 100:.0f} % vs the other ranks' median (they wait "
                     f"for it in collectives); {cause}")


def _cause(worst: RankStats, others: Sequence[RankStats], gpus: Mapping[str, Any]) -> str:
    span = worst.span_s or 0.0
    data = (worst.data_share or 0.0) * span
    others_data = statistics.median([(s.data_share or 0.0) * (s.span_s or 0.0) for s in others])
    excess_s = (worst.busy_s or 0.0) - statistics.median([s.busy_s or 0.0 for s in others])
    if (worst.data_share or 0.0) >= DATA_CAUSE_SHARE and data - others_data >= DATA_CAUSE_PART * excess_s:
        return f"{(worst.data_share or 0.0) * 100:.0f} % of its time waiting for data"
    key = _gpu_key(worst, gpus)
    if key is not None:
        g = gpus[key]
        label = f"GPU {g['index'] if g.get('index') is not None else worst.gpu}"
        if g.get("node"):
            label += f" on {g['node']}"
        reasons = sorted(g["reasons"].items(), key=lambda kv: -kv[1])
        if reasons and reasons[0][1] >= THROTTLE_CAUSE_SHARE:
            reason, share = reasons[0]
            return f"{label} {SLOWDOWN_REASONS[reason]} {share * 100:.0f} % of the last minute"
        clocks = [gpus[k]["sm_clock"] for s in others if (k := _gpu_key(s, gpus)) and gpus[k]["sm_clock"]]
        if g["sm_clock"] and clocks and g["sm_clock"] <= CLOCK_CAUSE_RATIO * statistics.median(clocks):
            return f"{label} SM clock {g['sm_clock']:.0f} MHz vs {statistics.median(clocks):.0f} MHz on the others"
    return "its own compute (no data wait or GPU slowdown seen)"


# ---- the hang watchdog ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class StallVerdict:
    stalled: bool
    for_s: float | None  # seconds since the last progress
    limit_s: float  # how long the watchdog waits
    why: str


def judge_stall(last_progress: float | None, step_s: float | None, now: float, *, factor: float = DEFAULT_STALL_FACTOR,
                floor_s: float = STALL_FLOOR_S, in_eval: bool = False, longest_eval_s: float | None = None
                ) -> StallVerdict:
    """Has progress stopped for longer than this run's own rhythm allows?"""
    if in_eval:
        limit = max(factor * longest_eval_s, floor_s) if longest_eval_s else max(EVAL_FLOOR_S, floor_s)
        basis = (f"{factor:g} x the longest eval so far ({longest_eval_s:.0f} s)" if longest_eval_s
                 else "no eval has finished yet")
    else:
        limit = max(factor * step_s, floor_s) if step_s else floor_s
        basis = f"{factor:g} x its step time ({step_s:.2f} s)" if step_s else "no step time yet"
    if last_progress is None:
        return StallVerdict(False, None, limit, "no progress recorded yet")
    quiet = max(0.0, now - last_progress)
    if quiet <= limit:
        return StallVerdict(False, quiet, limit, f"last progress {quiet:.0f} s ago (limit {limit:.0f} s: {basis})")
    what = "eval running" if in_eval else "no step"
    return StallVerdict(True, quiet, limit, f"stalled: {what} for {quiet:.0f} s (limit {limit:.0f} s: {basis})")


def run_stall(stats: Sequence[RankStats], now: float, *, factor: float = DEFAULT_STALL_FACTOR,
              floor_s: float = STALL_FLOOR_S, log_in_eval: bool = False, longest_eval_s: float | None = None
              ) -> StallVerdict:
    """The watchdog on a run's ranks: progress is the latest step of the slowest-moving live rank."""
    live = [s for s in stats if not s.ended]
    if not live:
        return StallVerdict(False, None, floor_s, "every rank has ended")
    progress = [s.last_progress for s in live]
    last = None if any(p is None for p in progress) else min(p for p in progress if p is not None)
    steps = [s.step_median_s for s in live if s.step_median_s]
    in_eval = log_in_eval or any(s.phase == "eval" for s in live)
    return judge_stall(last, max(steps) if steps else None, now, factor=factor, floor_s=floor_s,
                       in_eval=in_eval, longest_eval_s=longest_eval_s)


def stuck_ranks(stats: Sequence[RankStats], collective_by_stack: Mapping[int, bool | None] | None = None
                ) -> tuple[list[int], list[int]]:
    """(ranks not waiting in a collective, ranks waiting in one) of a stalled run.

    A rank's heartbeat says whether it has an unfinished collective; its captured stack, where there is
    one, settles the ranks whose heartbeat is silent.
    """
    stuck: list[int] = []
    waiting: list[int] = []
    for s in stats:
        if s.ended:
            continue
        by_stack = (collective_by_stack or {}).get(s.rank)
        waits = s.collective_since is not None or s.phase == "collective" or by_stack is True
        (waiting if waits else stuck).append(s.rank)
    return stuck, waiting


# ---- capture -------------------------------------------------------------------------------------------
def capture_stacks(run_folder: Path | str, stats: Sequence[RankStats], verdict: StallVerdict, *,
                   now: float, host: str, slurm_job: str | None = None) -> Path:
    """Capture every rank's Python stacks once (ranks on other nodes of Slurm job `slurm_job` through a
    step beside the job's own), ask the Flight Recorder to dump where the job enabled it (local ranks),
    and keep both with the ranks' heartbeats in `<run>/stacks/<stamp>.json`."""
    import time

    from perfwatch.core.telemetry import stacks as st

    ranks = []
    by_stack: dict[int, bool | None] = {}
    local = [(s.rank, s.pid) for s in stats if s.pid is not None and not s.ended and s.node in (None, host)]
    for s in stats:
        entry: dict[str, Any] = {"rank": s.rank, "node": s.node, "pid": s.pid, "phase": s.phase,
                                 "phase_since": s.phase_since, "collective_since": s.collective_since}
        remote = s.node not in (None, host)
        if s.ended:
            entry["error"] = "this rank had ended"
        elif s.pid is None or (remote and slurm_job is None):
            entry["error"] = f"on node {s.node}: not reachable from {host}"
        else:
            dump = st.dump_stacks(s.pid, on=st.slurm_step(slurm_job, str(s.node)) if remote and slurm_job else None)
            by_stack[s.rank] = st.in_collective(dump)
            entry.update(dump.as_json())
            entry["in_collective"] = by_stack[s.rank]
        ranks.append(entry)
    stuck, waiting = stuck_ranks(stats, by_stack)
    record = {"time": now, "verdict": verdict.why, "stuck_ranks": stuck, "waiting_ranks": waiting,
              "flight_recorder": st.trigger_flight_recorder(local), "ranks": ranks}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    path = layout.stacks_file(run_folder, stamp)
    path.parent.mkdir(parents=True, exist_ok=True)
    layout.write_json_atomic(path, record)
    return path


# ---- one summary for every front end -------------------------------------------------------------------
@dataclass(frozen=True)
class RankReport:
    """A distributed run's ranks as every front end shows them (the TUI's rank view, `report`,
    `--headless`, the metrics endpoint)."""

    ranks: tuple[RankStats, ...]
    straggler: Straggler | None
    captures: tuple[Path, ...]  # stacks/<stamp>.json files, oldest first
    # by rank: its GPU over the last minute (index, util %, sm_clock MHz, mem_used bytes, reasons {name: share})
    gpus: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

    def latest_capture(self) -> dict[str, Any] | None:
        """The newest stack capture, parsed (None: none, or unreadable)."""
        for path in reversed(self.captures):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data
        return None


def _telemetry_tail(path: Path, max_bytes: int = 1 << 20) -> list[dict[str, Any]]:
    """The last records of a telemetry.jsonl (its last MiB: about the last minute of a large job)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    if size > max_bytes:
        data = data.partition(b"\n")[2]
    out = []
    for line in data.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def rank_report(run_folder: Path | str, now: float | None = None) -> RankReport | None:
    """The ranks of the run in `run_folder`, or None when it writes no rank files."""
    folder = Path(run_folder)
    files = read_rank_files(folder)
    if not files:
        return None
    stats = rank_stats(files, now)
    telemetry = {"": _telemetry_tail(folder / layout.TELEMETRY_FILE)}
    for path in layout.node_telemetry_files(folder):  # a multi-node Slurm job: one file per compute node
        telemetry[layout.telemetry_node(path.name) or ""] = _telemetry_tail(path)
    try:
        captures = tuple(sorted((folder / layout.STACKS_DIR).glob("*.json")))
    except OSError:
        captures = ()
    minute = _gpu_minute(telemetry, now, WINDOW_S)
    gpus = {s.rank: minute[key] for s in stats if (key := _gpu_key(s, minute)) is not None}
    return RankReport(tuple(stats), find_straggler(stats, telemetry, now), captures, gpus)
