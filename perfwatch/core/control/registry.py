"""LOGDIR/perfwatch.json: the campaign's resolved plan and every run's process facts, typed.

`Registry` (msgspec Structs) is the file; readers use its attributes, never ad-hoc keys. Files
written by earlier versions read the same: a missing field takes its default, an unknown field
is ignored, an unknown run state reads as `unknown`.

Written atomically (temp file in the same folder, fsync, rename), so a reader (an
`attach`, a report) always sees a whole file even if perfwatch is SIGKILLed while
writing. Everything needed to re-adopt or continue a campaign is in here: a scheduler
can be rebuilt from this file alone.

Ownership: the process holding the `flock` on `LOGDIR/.scheduler.lock` is the only
writer. The kernel drops the lock when that process dies, which is how `attach` knows
it may take the campaign over.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import psutil

from perfwatch.core.control import trust
from perfwatch.core.control.campaign import Campaign, Launcher, RunSpec
from perfwatch.core.control.job_settings import CACHE_CLEAR_TIMEOUT, STALL_FACTOR
from perfwatch.core.control.paths import run_id_problem
from perfwatch.core.control.states import RunState
from perfwatch.core.ingest.discover import open_regular
from perfwatch.core.layout import LOCK_FILE, REGISTRY_FILE, write_json_atomic
from perfwatch.core.mlperf.rulesets import StandsFor, stands_for
from perfwatch.core.mlperf.targets import Target

FORMAT = 1


def host_facts() -> dict[str, Any]:
    """What the numbers were measured on (hostname, CPU, memory, Python, torch)."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(), "cpu_model": cpu, "cores": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False), "affinity": sorted(os.sched_getaffinity(0)),
        "memory_bytes": psutil.virtual_memory().total, "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    try:
        from importlib.metadata import version

        facts["torch"] = version("torch")
    except Exception:  # noqa: BLE001 - torch is optional
        facts["torch"] = None
    return facts


class SchedulerInfo(msgspec.Struct, kw_only=True):
    """The process that owns the campaign right now (None in the file once it let go)."""

    pid: int
    create_time: float
    host: str = ""
    since: float = 0.0
    max_parallel: int = 1


class RunRecord(msgspec.Struct, kw_only=True):
    """One `runs[]` entry: the planned run (a `RunSpec`, flat) and its process facts."""

    # -- the plan (RunSpec) --
    run_id: str
    argv: list[str]
    job: str = ""
    group: str = ""
    benchmark: str | None = None
    index: int = 0
    seed: int = 0
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str = "."
    gpus_per_run: int = 0  # RunSpec.devices: how many GPUs the run asks for
    threads: int = 1
    precision: str | None = None
    timeout: float | None = None
    stall_after: float | None = None
    grace: float = 10.0
    target: Target | None = None
    exit_at_target: bool = False
    isolate: str = "none"
    flops_per_sample: float | None = None
    peak_flops: dict[str, dict[str, float]] | None = None
    launcher: Launcher = msgspec.field(default_factory=Launcher)
    grid: dict[str, Any] = msgspec.field(default_factory=dict)
    cache_clear_cmd: list[str] | None = None
    cache_clear_timeout: float | None = CACHE_CLEAR_TIMEOUT
    devices_note: str | None = None
    mlperf: StandsFor | None = None  # the MLPerf benchmark the job stands for (campaign key `mlperf`)
    stall_factor: float = STALL_FACTOR
    on_stall: str = "capture"
    # -- the process, as the scheduler last wrote it --
    state: RunState = RunState.QUEUED
    attempt: int = 1
    exit_code: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    devices: list[int] = msgspec.field(default_factory=list)  # the GPU indices it was given
    stalled: bool = False
    reason: str | None = None
    pid: int | None = None
    pgid: int | None = None
    create_time: float | None = None
    host: str | None = None
    paused_total: float = 0.0
    paused_at: float | None = None  # when the current pause began
    slot: int | None = None  # its CPU share (isolate: per_device)
    descendants: list[tuple[int, float]] = msgspec.field(default_factory=list)  # (pid, create time) below it
    intent: RunState | None = None
    env_delta: dict[str, str] | None = None  # what the scheduler added to perfwatch's environment
    cache_clear: dict[str, Any] | None = None  # this attempt's cache clear, from exit.json
    slurm_job_id: str | None = None  # backend slurm: the current attempt's job
    attempts: list[dict[str, Any]] = msgspec.field(default_factory=list)  # earlier attempts' facts (restart)

    @classmethod
    def planned(cls, spec: RunSpec) -> RunRecord:
        """A queued run's first record."""
        return cls(
            run_id=spec.run_id, argv=list(spec.argv), job=spec.job, group=spec.group, benchmark=spec.benchmark,
            index=spec.index, seed=spec.seed, env=dict(spec.env), cwd=spec.cwd, gpus_per_run=spec.devices,
            threads=spec.threads, precision=spec.precision, timeout=spec.timeout, stall_after=spec.stall_after,
            grace=spec.grace, target=spec.target, exit_at_target=spec.exit_at_target, isolate=spec.isolate,
            flops_per_sample=spec.flops_per_sample, peak_flops=spec.peak_flops, launcher=spec.launcher,
            grid=dict(spec.grid), cache_clear_cmd=list(spec.cache_clear_cmd) if spec.cache_clear_cmd else None,
            cache_clear_timeout=spec.cache_clear_timeout, devices_note=spec.devices_note, mlperf=spec.mlperf,
            stall_factor=spec.stall_factor, on_stall=spec.on_stall,
        )

    def spec(self) -> RunSpec:
        """The plan back, as the scheduler needs it to (re)start the run."""
        return RunSpec(
            run_id=self.run_id, job=self.job, group=self.group, benchmark=self.benchmark, index=self.index,
            seed=self.seed, argv=tuple(self.argv), env=dict(self.env), cwd=self.cwd, devices=self.gpus_per_run,
            threads=self.threads, precision=self.precision, timeout=self.timeout, stall_after=self.stall_after,
            grace=self.grace, target=self.target, exit_at_target=self.exit_at_target, isolate=self.isolate,
            flops_per_sample=self.flops_per_sample, peak_flops=self.peak_flops, launcher=self.launcher,
            grid=dict(self.grid), cache_clear_cmd=tuple(self.cache_clear_cmd) if self.cache_clear_cmd else None,
            cache_clear_timeout=self.cache_clear_timeout, devices_note=self.devices_note, mlperf=self.mlperf,
            stall_factor=self.stall_factor, on_stall=self.on_stall,
        )


class Registry(msgspec.Struct, kw_only=True):
    """The whole of perfwatch.json."""

    runs: list[RunRecord]
    format: int = FORMAT
    name: str = ""
    file: str = ""
    description: str | None = None
    logdir: str = ""
    created_at: float | None = None
    updated_at: float | None = None
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    system: dict[str, Any] = msgspec.field(default_factory=dict)
    baseline: str | None = None
    max_parallel: int | None = None
    gpus: list[int] | None = None
    host: dict[str, Any] = msgspec.field(default_factory=dict)
    scheduler: SchedulerInfo | None = None
    trust: dict[str, Any] | None = None  # who signed the plan (see `trust`)
    backend: dict[str, Any] | None = None  # where runs execute (BackendConfig.to_dict()); None: local

    def targets(self) -> dict[str, Target]:
        return {r.run_id: r.target for r in self.runs if r.target is not None}

    def stand_ins(self) -> dict[str, StandsFor]:
        """Run id -> the MLPerf benchmark its job stands for (campaign key `mlperf`). Entries that this
        mlperf_logging does not know (an edited or planted file, a ruleset newer than the installed
        package) are left out: their names would become paths into mlperf_logging's data."""
        out = {}
        for r in self.runs:
            sf = r.mlperf
            if sf is None or sf.division not in ("open", "closed"):
                continue
            try:
                if stands_for(sf.benchmark, sf.ruleset, sf.division) == sf:
                    out[r.run_id] = sf
            except ValueError:  # UnknownBenchmark, UnknownRuleset
                continue
        return out


def new_registry(campaign: Campaign, logdir: Path) -> Registry:
    """The plan of a new campaign, signed as this user's on this host (see `trust`)."""
    data = Registry(
        name=campaign.name, file=str(Path(campaign.file).resolve()), description=campaign.description,
        logdir=str(logdir.resolve()), created_at=time.time(), config=campaign.config, system=campaign.system,
        baseline=campaign.baseline, max_parallel=campaign.max_parallel,
        gpus=list(campaign.gpus) if campaign.gpus is not None else None, host=host_facts(),
        runs=[RunRecord.planned(s) for s in campaign.runs], backend=campaign.backend.to_dict(),
    )
    sign(data)
    return data


def sign(data: Registry) -> None:
    """Sign the plan as it will be written (the file is `to_builtins(data)`, so a reader verifies the same)."""
    plain = msgspec.to_builtins(data)
    trust.sign(plain)
    data.trust = plain["trust"]


def write(logdir: Path, data: Registry) -> None:
    data.updated_at = time.time()
    write_json_atomic(logdir / REGISTRY_FILE, msgspec.to_builtins(data))


def _known_states(data: dict[str, Any]) -> None:
    """An unknown state (a newer perfwatch's, or a hand edit) reads as `unknown`, not as an unreadable file."""
    for rec in data["runs"]:
        if isinstance(rec, dict):
            if "state" in rec:
                rec["state"] = RunState.of(rec["state"]).value
            if rec.get("intent") is not None:
                intent = RunState.of(rec["intent"])
                rec["intent"] = None if intent is RunState.UNKNOWN else intent.value


def decode(data: object) -> Registry | None:
    """A Registry from perfwatch.json's plain data (any format perfwatch wrote); None if it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        return None
    _known_states(data)
    try:
        return msgspec.convert(data, Registry, strict=False)
    except msgspec.ValidationError:
        return None


MAX_REGISTRY_BYTES = 256 << 20  # 10,000 runs are ~12 MB; a symlink to /dev/zero must not be read forever


def _read_bytes(path: Path) -> bytes:
    """A regular file's bytes (a FIFO or device named perfwatch.json is an OSError, never a hang)."""
    with open_regular(path) as fh:
        data = fh.read(MAX_REGISTRY_BYTES + 1)
    if len(data) > MAX_REGISTRY_BYTES:
        raise OSError(f"larger than {MAX_REGISTRY_BYTES >> 20} MiB")
    return data


def read(logdir: Path) -> Registry | None:
    """perfwatch.json for a reader (report, a client `attach`): None when absent or unreadable."""
    try:
        data = json.loads(_read_bytes(Path(logdir) / REGISTRY_FILE))
    except (OSError, ValueError):
        return None
    return decode(data)


class RegistryError(Exception):
    """perfwatch.json exists but cannot be used: unreadable, truncated, or with unsafe content."""


def load_raw(logdir: Path) -> dict[str, Any] | None:
    """perfwatch.json's plain data checked for use by a scheduler (and for `trust`, which signs the plain data): None if there is none; RegistryError if it is
    unreadable (truncated, not JSON) or names something unsafe (a run folder outside LOGDIR, an
    argv that is not a list of strings, NUL bytes)."""
    path = Path(logdir) / REGISTRY_FILE
    try:
        text = _read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RegistryError(f"{path}: unreadable: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RegistryError(f"{path}: unreadable (truncated or not JSON: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise RegistryError(f"{path}: unreadable: not a perfwatch registry (no runs list)")
    problems = content_problems(data)
    if problems:
        raise RegistryError(f"{path}: refused: " + "; ".join(problems[:5]))
    return data



def load(logdir: Path) -> Registry | None:
    """`load_raw`, typed: None if there is none, RegistryError if it cannot be used."""
    raw = load_raw(logdir)
    if raw is None:
        return None
    data = decode(raw)
    if data is None:
        raise RegistryError(f"{Path(logdir) / REGISTRY_FILE}: unreadable: fields of the wrong type")
    return data


def _strings(value: object, what: str, out: list[str], *, allow_empty: bool = False) -> None:
    if not isinstance(value, list) or (not value and not allow_empty) or \
            not all(isinstance(v, str) and "\0" not in v for v in value):
        out.append(f"{what} is not a list of strings without NUL bytes")


def content_problems(data: dict[str, Any]) -> list[str]:
    """What in a registry a scheduler must not act on (run ids, argv, env, cwd, concurrency)."""
    out: list[str] = []
    seen: set[str] = set()
    mp = data.get("max_parallel")
    if mp is not None and (not isinstance(mp, int) or isinstance(mp, bool) or mp < 1):
        out.append(f"max_parallel {mp!r} is not a number of runs >= 1 (nothing would ever start)")
    for i, rec in enumerate(data["runs"]):
        if not isinstance(rec, dict):
            out.append(f"runs[{i}] is not a mapping")
            continue
        rid = rec.get("run_id")
        problem = run_id_problem(rid)
        if problem:
            out.append(f"runs[{i}]: {problem}")
            continue
        assert isinstance(rid, str)
        if rid in seen:
            out.append(f"runs[{i}]: run id {rid!r} appears twice")
        seen.add(rid)
        _strings(rec.get("argv"), f"runs[{i}].argv", out)
        if rec.get("cache_clear_cmd") is not None:
            _strings(rec.get("cache_clear_cmd"), f"runs[{i}].cache_clear_cmd", out)
        env = rec.get("env") or {}
        if not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
                for k, v in env.items()):
            out.append(f"runs[{i}].env is not a mapping of names (no '=', no NUL) to strings")
        if not isinstance(rec.get("cwd"), str) or "\0" in rec["cwd"]:
            out.append(f"runs[{i}].cwd is not a folder name")
    return out


def try_lock(logdir: Path) -> int | None:
    """Become the campaign's owner: an open fd holding the lock, or None if someone else has it."""
    try:
        fd = os.open(logdir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None  # a read-only LOGDIR (someone else's): watch it, never own it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def owner_alive(logdir: Path) -> bool:
    """Is some process holding the scheduler lock right now?"""
    fd = try_lock(logdir)
    if fd is None:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    return False
