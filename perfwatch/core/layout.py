"""The LOGDIR layout: every file name perfwatch writes or reads in a LOGDIR, and how it writes them.

One home for this knowledge, so a reader (the watcher, `report`, `attach`, a scheduler taking
a campaign over) and a writer (the scheduler, the supervisor, the telemetry thread) can never
disagree on a name. A LOGDIR that perfwatch launched looks like this:

    LOGDIR/
      perfwatch.json          REGISTRY_FILE: the resolved plan and every run's process facts
      .scheduler.lock         LOCK_FILE: flock held by the campaign's owner (kernel drops it on death)
      requests/               REQUESTS_DIR: one small JSON file per request from a detached `attach`
      scheduler.out           SCHEDULER_OUTPUT_FILE: what a detached owner printed
      <run_id>/               run_dir(): one folder per run, named by the run id
        mllog.txt             MLLOG_FILE: the workload's mllog records ($PERFWATCH_MLLOG)
        output.log            OUTPUT_FILE: the workload's stdout and stderr
        telemetry.jsonl       TELEMETRY_FILE: one JSON object per telemetry sample
        telemetry.<node>.jsonl  node_telemetry_name(): the same, sampled on compute node <node> (Slurm)
        exit.json             EXIT_FILE: the supervisor's exit record
        .attempt-N.<name>     archived_name(): an earlier attempt's files after a restart
        .slurm-job.json       SLURM_JOB_FILE: a Slurm attempt's argv/env for the in-job runner
        .slurm-batch.sh       SLURM_BATCH_FILE: the constant batch script sbatch is given
        ranks/rank_<N>.jsonl  rank_file(): rank N's step timing and heartbeats (perfwatch.instrument.ranks)
        stacks/<stamp>.json   stacks_file(): every rank's Python stacks, captured when the run stalled

Other trees (MLPerf results folders, any folder of mllog files) are read with `is_log_name`. An MLPerf
Training results tree also holds power measurements, `<benchmark>/power/<result stem>/node_N.txt` and
`sw_N.txt` (POWER_DIR, `is_power_log`, `power_folder`): the energy of their result file, never a run.
Outside any LOGDIR, in the user's cache folder (`user_cache_dir()`), perfwatch keeps what is costly
to find again and belongs to this machine, never to a LOGDIR: the measured CPU peak (CPU_PEAK_CACHE),
mlperf_logging's RCP verdicts per set of log files (RCP_CACHE) and its rule YAMLs as JSON (RULES_CACHE_DIR).

Whole-file JSON writers go through `write_json_atomic` (temp file in the same folder, fsync,
rename): a reader never sees half a file, even when the writer is SIGKILLed. This module is
imported by the per-run supervisor, so it imports nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

__all__ = [
    "EXIT_FILE", "LOCK_FILE", "MLLOG_FILE", "OUTPUT_FILE", "OWN_FILES", "REGISTRY_FILE", "REQUESTS_DIR",
    "RUN_FILES", "RUN_LOGS", "SCHEDULER_OUTPUT_FILE", "SLURM_BATCH_FILE", "SLURM_JOB_FILE", "TELEMETRY_FILE",
    "POWER_DIR", "RANKS_DIR", "STACKS_DIR", "archived_name", "is_log_name", "is_meant_as_log", "is_power_log",
    "node_telemetry_files", "node_telemetry_name", "power_folder", "rank_file", "rank_of_file", "request_name",
    "run_dir", "run_id_for", "stacks_file", "telemetry_node", "write_json_atomic",
    "CPU_PEAK_CACHE", "RCP_CACHE", "RULES_CACHE_DIR", "user_cache_dir",
]

# ---- LOGDIR level -------------------------------------------------------------------
REGISTRY_FILE = "perfwatch.json"
LOCK_FILE = ".scheduler.lock"
REQUESTS_DIR = "requests"
SCHEDULER_OUTPUT_FILE = "scheduler.out"  # stdout/stderr of a detached campaign owner (`launch --detach`)

# ---- run folder level -----------------------------------------------------------------
MLLOG_FILE = "mllog.txt"
OUTPUT_FILE = "output.log"
TELEMETRY_FILE = "telemetry.jsonl"
EXIT_FILE = "exit.json"
SLURM_JOB_FILE = ".slurm-job.json"
SLURM_BATCH_FILE = ".slurm-batch.sh"
RANKS_DIR = "ranks"  # one step-timing file per rank of a distributed run
STACKS_DIR = "stacks"  # Python stacks of every rank, captured by the hang watchdog
_TELEMETRY_HEAD, _TELEMETRY_TAIL = "telemetry.", ".jsonl"


def node_telemetry_name(node: str) -> str:
    """THE per-node telemetry file name: `telemetry.<node>.jsonl` (a node name is kept to letters,
    digits, `-` and `_`, so it can never name a path or hide as another file)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in node) or "_"
    return f"{_TELEMETRY_HEAD}{safe}{_TELEMETRY_TAIL}"


def telemetry_node(name: str) -> str | None:
    """The inverse: the node a telemetry file was sampled on ("" for TELEMETRY_FILE), None if not one."""
    if name == TELEMETRY_FILE:
        return ""
    if name.startswith(_TELEMETRY_HEAD) and name.endswith(_TELEMETRY_TAIL):
        node = name[len(_TELEMETRY_HEAD):-len(_TELEMETRY_TAIL)]
        return node if node and node_telemetry_name(node) == name else None
    return None


def node_telemetry_files(folder: Path | str) -> list[Path]:
    """A run folder's per-node telemetry files, by node name."""
    found = (p for p in Path(folder).glob(f"{_TELEMETRY_HEAD}*{_TELEMETRY_TAIL}") if telemetry_node(p.name))
    return sorted(found, key=lambda p: p.name)


RUN_LOGS = (MLLOG_FILE, OUTPUT_FILE)  # what a run writes as it trains (its activity)
RUN_FILES = (MLLOG_FILE, OUTPUT_FILE, EXIT_FILE, TELEMETRY_FILE, RANKS_DIR, STACKS_DIR)  # one attempt's files and folders
OWN_FILES = frozenset({REGISTRY_FILE, TELEMETRY_FILE, EXIT_FILE})  # perfwatch's records, never mllog

_LOG_SUFFIXES = (".txt", ".log")
# rotated copies (mllog.txt.1) and compressed files would count lines twice or not decode
_COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zip", ".lz4")


def _rotated_or_compressed(name: str) -> bool:
    """`mllog.txt.1`, `output.log.12`, `x.txt.gz`."""
    if name.endswith(_COMPRESSED_SUFFIXES):
        return True
    head, dot, num = name.rpartition(".")
    return bool(dot) and num.isdecimal() and head.endswith(_LOG_SUFFIXES)


def run_dir(logdir: Path | str, run_id: str) -> Path:
    """A run's folder: the run id is its path below LOGDIR (`mlp.bs32.r0`, `sweep/a/r1`)."""
    return Path(logdir) / run_id


def run_id_for(path: Path | str, root: Path | str) -> str:
    """THE run-id rule, the inverse of `run_dir`: what a log file under `root` is called.

    `<root>/<run>/mllog.txt` and `<root>/<run>/output.log` belong to the run `<run>` (the folder's
    path below root; a run folder given as root is named after itself); any other log is named by
    its path below root without `.txt`/`.log` (an MLPerf results tree: `bert/result_0`). A single
    file given as root is read against its folder.
    """
    path, root = Path(path), Path(root)
    if root == path:
        root = path.parent
    try:
        rel = path.relative_to(root)
    except ValueError:
        rel = Path(path.name)
    if path.name in RUN_LOGS:
        folder = rel.parent.as_posix()
        return folder if folder not in ("", ".") else root.name or "run"
    return rel.with_suffix("").as_posix() if rel.suffix in _LOG_SUFFIXES else rel.as_posix()


def repeat_id(group: str, index: int) -> str:
    """THE repeat rule: the `index`-th repeat of a campaign's configuration `group` (`mlp.bs32` -> `mlp.bs32.r2`)."""
    return f"{group}.r{index}"


def without_repeat(run_id: str) -> str:
    """`repeat_id`'s inverse: `mlp.bs32.r2` -> `mlp.bs32` (the repeats of one configuration share the rest);
    any other id is its own group."""
    head, sep, num = run_id.rpartition(".r")
    return head if sep and num.isdecimal() else run_id


def is_result_name(stem: str) -> bool:
    """The stem of an MLPerf result file: `result_*`, as MLPerf's summarizer globs a benchmark folder
    (`result_3`, `result_5119-240510190348838227199_06`)."""
    return stem.startswith("result_")


def is_meant_as_log(path: Path | str) -> bool:
    """A file that is a run's log by its name alone (a run folder's mllog.txt, an MLPerf `result_*.txt`):
    reported even when nothing in it decodes. Any other file is a log only if it holds a record."""
    p = Path(path)
    return p.name == MLLOG_FILE or (p.suffix == ".txt" and is_result_name(p.stem))


# ---- MLPerf power measurements (a results tree's `power/` folders) ---------------------------------
POWER_DIR = "power"
POWER_NODE_PREFIX = "node_"  # one per node: power_measurement_start/stop, power_reading, conversion_eff
POWER_SWITCH_PREFIX = "sw_"  # one per interconnect switch: interconnect_power_est


def power_folder(result_file: Path | str) -> Path:
    """Where a result file's power logs are: `<its folder>/power/<its name up to the first dot>`."""
    path = Path(result_file)
    return path.parent / POWER_DIR / path.name.split(".")[0]


def is_power_log(path: Path | str) -> bool:
    """`.../power/<result stem>/node_*.txt` or `sw_*.txt`: a power measurement, read with its result file."""
    p = Path(path)
    return (p.suffix == ".txt" and p.name.startswith((POWER_NODE_PREFIX, POWER_SWITCH_PREFIX))
            and p.parent.parent.name == POWER_DIR)


def rank_file(run_folder: Path | str, rank: int) -> Path:
    """Rank `rank`'s step-timing file in a run folder (JSON lines; never read as an mllog)."""
    return Path(run_folder) / RANKS_DIR / f"rank_{int(rank)}.jsonl"


def rank_of_file(name: str) -> int | None:
    """`rank_file`'s inverse on a file name: `rank_3.jsonl` -> 3, anything else -> None."""
    stem, dot, ext = name.rpartition(".")
    head, _, num = stem.partition("rank_")
    if dot and ext == "jsonl" and not head and num.isdecimal():
        return int(num)
    return None


def stacks_file(run_folder: Path | str, stamp: str) -> Path:
    """Where one capture of a run's stacks is kept (`stamp`: UTC time, sortable)."""
    return Path(run_folder) / STACKS_DIR / f"{stamp}.json"


def archived_name(attempt: int, name: str) -> str:
    """Where attempt `attempt`'s `name` is kept after a restart (hidden: never read as a new run)."""
    return f".attempt-{attempt}.{name}"


def request_name(sent_at: float, token: str) -> str:
    """A request file's name in REQUESTS_DIR: sorts oldest first, unique per sender."""
    return f"{sent_at:.6f}-{token}.json"


def is_log_name(path: Path | str) -> bool:
    """Files worth reading for mllog records (cheap name test; content decides later).

    `*.txt`, `*.log` or a name containing `mllog`; never perfwatch's own records, hidden files
    (attempt archives, temp files of atomic writes), rotated copies, compressed files or MLPerf power
    measurements (`is_power_log`).
    """
    name = os.path.basename(path)
    if name in OWN_FILES or name.startswith(".") or _rotated_or_compressed(name):
        return False
    if name.startswith((POWER_NODE_PREFIX, POWER_SWITCH_PREFIX)) and is_power_log(path):
        return False
    return name.endswith(_LOG_SUFFIXES) or "mllog" in name


# ---- the user's cache folder (never inside a LOGDIR) ----------------------------------------------
CPU_PEAK_CACHE = "cpu_peak.json"  # `perfwatch peak --measure`: the host's matmul peak, when and how
RCP_CACHE = "rcp_verdicts.json"  # mlperf_logging's RCP verdict per set of log files (path, size, mtime)
RULES_CACHE_DIR = "mlperf-rules"  # one JSON file per checker rule YAML (mlperf/rule_files.py)


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME/perfwatch, else ~/.cache/perfwatch (created by whoever writes there)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfwatch"


def write_json_atomic(path: Path, data: object, *, indent: int | None = 1) -> None:
    """Temp file in the same folder + fsync + rename: readers never see half a file."""

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=indent, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
