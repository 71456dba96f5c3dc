"""Campaign YAML -> validated `Campaign` -> expanded `RunSpec`s (DESIGN §3, R5).

Everything a launch needs is decided here, before anything starts: a campaign that
would fail halfway (a typo in a key, an empty grid, a script that does not exist)
is rejected whole with `file:line: field: message`.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec

from perfwatch.core.control import process
from perfwatch.core.control.backends import BackendConfig
from perfwatch.core.control.backends.settings import BACKEND_KEYS, backend_config
from perfwatch.core.control.job_settings import (
    CACHE_CLEAR_KEYS,
    CACHE_CLEAR_TIMEOUT,
    RUN_FIELDS,
    SETTING_KEYS,
    STALL_FACTOR,
    Settings,
    argv_list,
    check_template,
    settings,
)
from perfwatch.core.control.yaml_nodes import CampaignError, LocatedNode, load
from perfwatch.core.layout import repeat_id
from perfwatch.core.mlperf.rulesets import StandsFor
from perfwatch.core.mlperf.targets import Target

__all__ = ["Campaign", "CampaignError", "Launcher", "RunSpec", "load_campaign"]

TOP_KEYS = ("name", "description", "logdir", "system", "defaults", "jobs", "baseline", "scheduler",
            "python", "relative_to", *CACHE_CLEAR_KEYS)
RELATIVE_TO = ("campaign_file", "current_dir")  # what relative script paths and `cwd` resolve against
JOB_KEYS = ("name", "cmd", "args", "launcher", *SETTING_KEYS)
SYSTEM_KEYS = ("name", "submitter", "division", "status", "notes")
SCHEDULER_KEYS = ("max_parallel", "gpus", *BACKEND_KEYS)
LAUNCHER_KEYS = ("type", "nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "rdzv_backend")
ABBREV = {"--batch-size": "bs", "--batch_size": "bs", "--lr": "lr", "--learning-rate": "lr"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")
MAX_RUNS = 10_000  # per campaign: more is a typo (`repeat: 100000000`) that would never finish expanding
MAX_EXPANDED = 32_768  # characters in one templated argument or env value after filling in the fields
_PYTHONS = ("python", "python3", f"python3.{sys.version_info.minor}")
_IMPORTS_TORCH = re.compile(rb"^[ \t]*(?:import|from)[ \t]+torch\b", re.MULTILINE)
_SCRIPT_SCAN_BYTES = 1 << 20  # a training script's imports are at its top
TORCH_CHECK_TIMEOUT = 30.0  # seconds for `python -c "find_spec('torch')"` in a named interpreter


@dataclass(frozen=True)
class Launcher:
    type: str = "direct"  # "direct" or "torchrun"
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "c10d"


@dataclass(frozen=True)
class RunSpec:
    """One planned run: everything needed to start it, nothing about its process."""

    run_id: str
    job: str
    group: str  # run id without the repeat suffix: what `baseline` and reports compare
    benchmark: str | None
    index: int
    seed: int
    argv: tuple[str, ...]
    env: dict[str, str]  # the delta over perfwatch's own environment
    cwd: str
    devices: int  # GPUs per run (0 = CPU only)
    threads: int  # CPU threads per run (OMP_NUM_THREADS, affinity share)
    precision: str | None
    timeout: float | None
    stall_after: float | None
    grace: float
    target: Target | None
    exit_at_target: bool
    isolate: str
    flops_per_sample: float | None
    launcher: Launcher
    grid: dict[str, Any] = field(default_factory=dict)
    cache_clear_cmd: tuple[str, ...] | None = None  # run by the runner before the workload, each attempt
    cache_clear_timeout: float | None = CACHE_CLEAR_TIMEOUT
    devices_note: str | None = None  # how `devices: auto` was resolved, for the plan
    # the campaign's peak for MFU: {device name pattern or "*": {dtype or "*": FLOP/s}} (job_settings.peak_flops)
    peak_flops: dict[str, dict[str, float]] | None = None
    mlperf: StandsFor | None = None  # the MLPerf benchmark the job stands for (job key `mlperf`)
    stall_factor: float = STALL_FACTOR  # the hang watchdog: stalled after this many step times
    on_stall: str = "capture"  # ... and then: capture the stacks, also stop, or also restart


@dataclass(frozen=True)
class Campaign:
    name: str
    file: str
    description: str | None
    logdir: str  # template: {name}, {timestamp}
    system: dict[str, str]
    baseline: str | None
    max_parallel: int | None  # None = auto
    gpus: tuple[int, ...]  # the GPUs runs may get (NVML indices): the ones validation counted on
    runs: tuple[RunSpec, ...]
    config: dict[str, Any]  # the file's plain data, for perfwatch.json
    backend: BackendConfig = field(default_factory=BackendConfig)  # where runs execute (local, slurm)
    python: str = sys.executable  # the interpreter `python` in a cmd means (campaign key `python`)


def _launcher(y: LocatedNode, *, slurm: bool = False) -> Launcher:
    fields = y.mapping(LAUNCHER_KEYS)
    kind = fields["type"].string() if "type" in fields else "direct"
    if kind not in ("direct", "torchrun"):
        raise fields["type"].error(f"expected 'direct' or 'torchrun', got {kind!r}")
    nnodes = fields["nnodes"].integer(minimum=1) if "nnodes" in fields else 1
    rank = fields["node_rank"].integer(minimum=0) if "node_rank" in fields else 0
    if rank >= nnodes:
        raise fields["node_rank"].error(f"node_rank {rank} must be < nnodes {nnodes}")
    endpoint = fields["rdzv_endpoint"].string() if "rdzv_endpoint" in fields else None
    if nnodes > 1 and endpoint is None and not slurm:  # on Slurm the rendezvous comes from the allocation
        raise y.error("nnodes > 1 needs rdzv_endpoint (host:port of node 0)")
    return Launcher(
        type=kind,
        nproc_per_node=fields["nproc_per_node"].integer(minimum=1) if "nproc_per_node" in fields else 1,
        nnodes=nnodes, node_rank=rank, rdzv_endpoint=endpoint,
        rdzv_backend=fields["rdzv_backend"].string() if "rdzv_backend" in fields else "c10d",
    )


def _arg_values(y: LocatedNode) -> list[Any]:
    """One arg's values: a scalar is one value, a list is a grid axis."""
    if y.shape == "mapping":
        raise y.expected("a scalar or a list")
    if y.shape == "list":
        items = y.seq()
        if not items:
            raise y.error("empty list: a grid axis needs at least one value")
        out = []
        for it in items:
            if it.shape != "scalar":
                raise it.expected("a scalar grid value")
            out.append(_scalar_arg(it))
        if len(set(map(str, out))) != len(out):
            raise y.error("duplicate values in the grid")
        return out
    return [_scalar_arg(y)]


def _scalar_arg(y: LocatedNode) -> Any:
    v = y.value()
    if isinstance(v, str):
        check_template(y, v, RUN_FIELDS)
    elif not isinstance(v, (int, float, bool)) and v is not None:
        raise y.expected("a string, number or boolean")
    return v


def _check_cmd(items: list[LocatedNode], cmd: list[str], cwd: Path) -> None:
    """Fail now, not at run time, when the program or script does not exist."""
    prog = cmd[0]
    if "{" in prog:
        return
    if prog not in _PYTHONS:
        if "/" in prog:
            if not (cwd / prog).exists():
                raise items[0].error(f"no such file: {cwd / prog}")
        elif shutil.which(prog) is None:
            raise items[0].error(f"program {prog!r} not found on PATH")
    for i, part in enumerate(cmd[1:], start=1):
        if part.endswith(".py") and "{" not in part and not (cwd / part).is_file():
            raise items[i].error(f"no such script: {cwd / part}")


def _check_torch(items: list[LocatedNode], cmd: list[str], cwd: Path, python: str, torchrun: bool) -> None:
    """A run whose script imports torch (or that torchrun starts) needs torch in the campaign's interpreter."""
    if cmd[0] not in _PYTHONS and not torchrun:
        return
    needs: LocatedNode | None = items[0] if torchrun else None
    for i, part in enumerate(cmd[1:], start=1):
        if needs is None and part.endswith(".py") and "{" not in part and _imports_torch(cwd / part):
            needs = items[i]
    if needs is not None and not _has_torch(python):
        what = "torchrun" if torchrun else f"{needs.string()} imports torch"
        raise needs.error(f"{what}, but the interpreter {python} has no torch: install it there "
                          "(pip install 'perfwatch[workloads]') or name one that has it with the campaign's "
                          "top-level `python:` key")


def _imports_torch(script: Path) -> bool:
    try:
        with open(script, "rb") as fh:
            return _IMPORTS_TORCH.search(fh.read(_SCRIPT_SCAN_BYTES)) is not None
    except OSError:
        return False


@functools.cache
def _has_torch(python: str) -> bool:
    """Whether `import torch` would find a package in that interpreter (nothing is imported)."""
    if python == sys.executable:
        return importlib.util.find_spec("torch") is not None
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=TORCH_CHECK_TIMEOUT).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _python(y: LocatedNode, base: Path) -> str:
    """The campaign's `python:` key: a path (relative ones against the campaign's base folder) or a program
    on PATH. The path is kept as written (a venv's python is a symlink that must not be resolved)."""
    text = y.string()
    if "/" in text:
        path = Path(os.path.normpath(base / text))
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise y.error(f"no executable interpreter at {path}")
        return str(path)
    found = shutil.which(text)
    if found is None:
        raise y.error(f"program {text!r} not found on PATH")
    return found


def _base(fields: dict[str, LocatedNode], path: Path) -> Path:
    """The folder relative script paths and `cwd` resolve against: the campaign file's, unless it says
    `relative_to: current_dir`."""
    where = fields["relative_to"].string() if "relative_to" in fields else RELATIVE_TO[0]
    if where not in RELATIVE_TO:
        raise fields["relative_to"].error(f"expected one of {', '.join(RELATIVE_TO)}, got {where!r}")
    return Path.cwd().resolve() if where == "current_dir" else path.resolve().parent


def _label(key: str, value: Any) -> str:
    name = ABBREV.get(key, key.lstrip("-").replace("_", "-"))
    return _ID_UNSAFE.sub("-", f"{name}{value}")


def _argv(cmd: list[str], args: list[tuple[str, Any]], launcher: Launcher, name: str, python: str) -> list[str]:
    parts = list(cmd)
    if parts[0] in _PYTHONS:
        parts[0] = python  # the campaign's interpreter (default: the one perfwatch runs in)
    for key, value in args:
        if value is None or value is False:
            continue
        parts.append(key)
        if value is not True and value != "":
            parts.append(str(value))
    if launcher.type != "torchrun":
        return parts
    tr = [python, "-m", "torch.distributed.run", f"--nproc-per-node={launcher.nproc_per_node}",
          f"--nnodes={launcher.nnodes}"]
    if launcher.rdzv_endpoint:
        tr += [f"--node-rank={launcher.node_rank}", f"--rdzv-backend={launcher.rdzv_backend}",
               f"--rdzv-endpoint={launcher.rdzv_endpoint}", f"--rdzv-id={name}"]
    else:
        tr += ["--standalone"]
    if parts[0] == python:
        return tr + parts[1:]
    if parts[0].endswith(".py"):
        return tr + parts
    return tr + ["--no-python"] + parts


def _devices(job_conf: Settings, launcher: Launcher, gpus: tuple[int, ...], job: LocatedNode) -> tuple[int, str | None]:
    """GPUs per run and, for `auto`, how it was decided. Each torchrun rank needs a GPU of its own."""
    ranks = launcher.nproc_per_node
    have = f"{len(gpus)} visible to perfwatch" if gpus else "none visible to perfwatch"
    if job_conf.devices is None:
        if not gpus:
            return 0, "auto: no GPU"
        if len(gpus) < ranks:
            return 0, f"auto: {ranks} ranks need {ranks} GPUs, {have}"
        return ranks, "auto"
    where = job_conf.devices_y or job
    if job_conf.devices == 0:
        return 0, None
    if job_conf.devices > len(gpus):
        raise where.error(f"needs {job_conf.devices} GPU(s) per run; this machine has {have} "
                          "(use `devices: auto` or 0 for the CPU)")
    if job_conf.devices < ranks:
        raise where.error(f"torchrun starts {ranks} ranks per node, one GPU each: devices must be >= {ranks} "
                          "(or 0 for the CPU)")
    return job_conf.devices, None


def _slurm_devices(job_conf: Settings, launcher: Launcher, job: LocatedNode) -> tuple[int, str | None]:
    """GPUs per run on Slurm (`--gres=gpu:N`): an explicit count, or none for `auto` (not knowable here)."""
    if job_conf.devices is None:
        return 0, "auto on Slurm: no GPUs requested (set devices: N for --gres=gpu:N)"
    ranks = launcher.nproc_per_node
    if 0 < job_conf.devices < ranks:
        raise (job_conf.devices_y or job).error(f"torchrun starts {ranks} ranks per node, one GPU each: devices must be "
                                         f">= {ranks} (or 0 for the CPU)")
    return job_conf.devices, None


def _fill(text: str, values: dict[str, Any]) -> str:
    return text.format(**values) if "{" in text else text


def _checked_size(y: LocatedNode, text: str) -> str:
    if len(text) > MAX_EXPANDED:
        raise y.error(f"expands to {len(text):,} characters (the limit is {MAX_EXPANDED:,})")
    return text


def _unique_ids(y: LocatedNode, groups: dict[str, tuple[tuple[str, Any], ...]],
                group: str, grid: dict[str, Any]) -> None:
    """Two grid points whose labels sanitise alike (`adam_w`, `adam-w`) would share a run id: refuse."""
    mine = tuple(grid.items())
    other = groups.setdefault(group, mine)
    if other != mine:
        a = ", ".join(f"{k}={v!r}" for k, v in other)
        b = ", ".join(f"{k}={v!r}" for k, v in mine)
        raise y.error(f"grid points {{{a}}} and {{{b}}} get the same run id {group!r}: make the values differ "
                      "in letters or digits, or split them into two jobs")


def _job_runs(y: LocatedNode, defaults: Settings, campaign: str, base: Path, gpus: tuple[int, ...],
              budget: int = MAX_RUNS, *, slurm: bool = False, division: str | None = None,
              python: str = sys.executable) -> list[RunSpec]:
    fields = y.mapping(JOB_KEYS)
    if "name" not in fields:
        raise y.error("missing key 'name'")
    name = fields["name"].string()
    if not _NAME.fullmatch(name):
        raise fields["name"].error(f"job names use letters, digits, - and _ (got {name!r})")
    if "cmd" not in fields:
        raise y.error("missing key 'cmd' (the program as an argv list, e.g. [python, train.py])")
    items = argv_list(fields["cmd"], "[python, train.py]")
    cmd = [it.string() for it in items]
    job_conf = settings({k: v for k, v in fields.items() if k in SETTING_KEYS}, defaults)
    if job_conf.mlperf is not None and not job_conf.mlperf_division_set and division:
        job_conf.mlperf = msgspec.structs.replace(job_conf.mlperf, division=division)  # the campaign's system.division
    cwd = (base / job_conf.cwd).resolve() if job_conf.cwd else base
    if job_conf.cwd and not cwd.is_dir():
        raise fields["cwd"].error(f"no such directory: {cwd}")
    _check_cmd(items, cmd, cwd)
    if job_conf.cache_clear_cmd is not None and job_conf.cache_clear_y is not None:
        _check_cmd(job_conf.cache_clear_y.seq(), list(job_conf.cache_clear_cmd), cwd)
    launcher = _launcher(fields["launcher"], slurm=slurm) if "launcher" in fields else Launcher()
    _check_torch(items, cmd, cwd, python, launcher.type == "torchrun")
    if slurm:  # the GPUs are the compute nodes', requested with --gres, not this host's
        devices, devices_note = _slurm_devices(job_conf, launcher, y)
    else:
        devices, devices_note = _devices(job_conf, launcher, gpus, y)
    axes: list[tuple[str, list[Any]]] = []
    if "args" in fields:
        for key, arg_node in fields["args"].mapping().items():
            if not key.startswith("-"):
                raise arg_node.error("argument names start with - or -- (e.g. --batch-size)")
            axes.append((key, _arg_values(arg_node)))
    repeat = job_conf.repeat
    if job_conf.seeds is not None:
        if not job_conf.repeat_set:
            repeat = len(job_conf.seeds)
        elif len(job_conf.seeds) < repeat and job_conf.seeds_y is not None:
            raise job_conf.seeds_y.error(f"{len(job_conf.seeds)} seeds for repeat: {repeat}")
    count = repeat
    for _, vals in axes:
        count *= len(vals)
    if count > budget:  # counted before expanding: 10 axes x 10 values must not take forever to refuse
        where = fields["args"] if axes and "args" in fields else fields.get("repeat", y)
        raise where.error(f"{count:,} runs ({' x '.join(str(len(v)) for _, v in axes) or '1'} grid points x "
                          f"{repeat} repeats); a campaign may have at most {MAX_RUNS:,}")
    runs: list[RunSpec] = []
    groups: dict[str, tuple[tuple[str, Any], ...]] = {}
    for point in itertools.product(*(vals for _, vals in axes)):
        chosen = list(zip((k for k, _ in axes), point, strict=True))
        grid = {k: v for (k, vals), (_, v) in zip(axes, chosen, strict=True) if len(vals) > 1}
        group = ".".join([name, *("_".join(_label(k, v) for k, v in grid.items()),)] if grid else [name])
        _unique_ids(fields.get("args", y), groups, group, grid)
        for index in range(repeat):
            seed = job_conf.seeds[index] if job_conf.seeds is not None else job_conf.seed + index
            run_id = repeat_id(group, index)
            values = {"seed": seed, "index": index, "run_id": run_id, "name": campaign, "job": name}
            filled = [(k, _checked_size(fields["args"], _fill(v, values)) if isinstance(v, str) else v) for k, v in chosen]
            argv = _argv([_checked_size(fields["cmd"], _fill(c, values)) for c in cmd], filled, launcher,
                         f"{campaign}-{run_id}", python)
            env = {k: _checked_size(fields.get("env", y), _fill(v, values)) for k, v in job_conf.env.items()}
            clear = None
            if job_conf.cache_clear_cmd is not None:
                clear = tuple(_fill(c, values) for c in job_conf.cache_clear_cmd)
                clear = (sys.executable, *clear[1:]) if clear[0] in _PYTHONS else clear
            runs.append(RunSpec(
                run_id=run_id, job=name, group=group, benchmark=job_conf.benchmark, index=index, seed=seed,
                argv=tuple(argv), env=env, cwd=str(cwd), devices=devices, threads=job_conf.threads,
                precision=job_conf.precision, timeout=job_conf.timeout, stall_after=job_conf.stall_after,
                grace=job_conf.grace, target=job_conf.target, exit_at_target=job_conf.exit_at_target,
                isolate=job_conf.isolate, flops_per_sample=job_conf.flops_per_sample, launcher=launcher, grid=grid,
                cache_clear_cmd=clear, cache_clear_timeout=job_conf.cache_clear_timeout, devices_note=devices_note,
                peak_flops=job_conf.peak_flops, mlperf=job_conf.mlperf, stall_factor=job_conf.stall_factor,
                on_stall=job_conf.on_stall,
            ))
    return runs


def names_run(run: RunSpec, name: str) -> bool:
    """Whether `name` is the run's job, run group or run id: how `baseline` and `launch --only` pick runs."""
    return name in (run.job, run.group, run.run_id)


def select_runs(campaign: Campaign, names: list[str]) -> Campaign:
    """The campaign with only the runs some name picks (`launch --only`); the baseline stays if it is among them."""
    unknown = [n for n in names if not any(names_run(r, n) for r in campaign.runs)]
    if unknown:
        jobs = ", ".join(dict.fromkeys(r.job for r in campaign.runs))
        raise CampaignError(campaign.file, 0, "", f"--only {', '.join(unknown)}: no such job, run group or run"
                                                  f" (jobs: {jobs})")
    runs = tuple(r for r in campaign.runs if any(names_run(r, n) for n in names))
    baseline = campaign.baseline
    if baseline is not None and not any(names_run(r, baseline) for r in runs):
        baseline = None
    return replace(campaign, runs=runs, baseline=baseline)


def load_campaign(path: str | Path, *, base: Path | None = None, gpus: tuple[int, ...] | None = None,
                  backend: str | None = None) -> Campaign:
    """Validate and expand a campaign file; raises CampaignError naming file:line:field.

    `backend` ('local' or 'slurm', from `launch --backend`) overrides `scheduler: {backend: ...}`.

    Relative `cmd` scripts, `cwd` and `python` resolve against the campaign file's folder, or the
    current directory where the file says `relative_to: current_dir`; `base` overrides both.
    `gpus` is this machine's GPUs perfwatch may use (default: `process.detect_gpus()`);
    `devices` of every job is resolved and checked against it (or the campaign's `scheduler.gpus`).
    """
    root = load(Path(path))
    fields = root.mapping(TOP_KEYS)
    base = base.resolve() if base is not None else _base(fields, Path(path))
    python = _python(fields["python"], base) if "python" in fields else sys.executable
    if "jobs" not in fields:
        raise root.error("missing key 'jobs' (the list of runs to launch)")
    name = fields["name"].string() if "name" in fields else Path(path).stem
    if not _NAME.fullmatch(name):
        raise fields["name"].error(f"campaign names use letters, digits, - and _ (got {name!r})")
    logdir = "runs/{name}-{timestamp}"
    if "logdir" in fields:
        logdir = check_template(fields["logdir"], fields["logdir"].string(), ("name", "timestamp"))
    system: dict[str, str] = {}
    if "system" in fields:
        for k, v in fields["system"].mapping(SYSTEM_KEYS).items():
            system[k] = v.string()
            if k == "division" and system[k] not in ("open", "closed"):
                raise v.error(f"expected 'open' or 'closed', got {system[k]!r}")
    # cache_clear_* at the top level is the campaign-wide value; `defaults` and jobs may override it
    defaults = settings({k: fields[k] for k in CACHE_CLEAR_KEYS if k in fields}, Settings())
    if "defaults" in fields:
        dm = fields["defaults"].mapping(SETTING_KEYS)
        for key in CACHE_CLEAR_KEYS:
            if key in dm and key in fields:
                raise dm[key].error(f"also set at the top level (line {fields[key].line}); set it in one place")
        defaults = settings(dm, defaults)
    max_parallel: int | None = None
    machine = process.detect_gpus() if gpus is None else tuple(gpus)
    gpus = machine
    where = BackendConfig(backend=backend or "local")
    if "scheduler" in fields:
        sm = fields["scheduler"].mapping(SCHEDULER_KEYS)
        where = backend_config(sm, backend)
        if "max_parallel" in sm and sm["max_parallel"].text() != "auto":
            max_parallel = sm["max_parallel"].integer(minimum=1)
        if "gpus" in sm and sm["gpus"].text() != "auto":
            listed = []
            for g in sm["gpus"].seq():
                index = g.integer(minimum=0)
                if index not in machine:
                    seen = ", ".join(map(str, machine)) if machine else "none"
                    raise g.error(f"no GPU {index} here (GPUs visible to perfwatch: {seen})")
                if index in listed:
                    raise g.error(f"GPU {index} listed twice")
                listed.append(index)
            gpus = tuple(listed)
    jobs = fields["jobs"].seq()
    if not jobs:
        raise fields["jobs"].error("empty list: a campaign needs at least one job")
    runs: list[RunSpec] = []
    seen_jobs: dict[str, LocatedNode] = {}
    for jy in jobs:
        job_runs = _job_runs(jy, defaults, name, base, gpus, MAX_RUNS - len(runs), slurm=where.backend == "slurm",
                             division=system.get("division"), python=python)
        jname = job_runs[0].job if job_runs else ""
        if jname in seen_jobs:
            ny = jy.mapping()["name"]
            raise ny.error(f"duplicate job name (first on line {seen_jobs[jname].line})")
        seen_jobs[jname] = jy
        runs.extend(job_runs)
    baseline = None
    if "baseline" in fields:
        baseline = fields["baseline"].string()
        if not any(names_run(r, baseline) for r in runs):
            groups = sorted({r.group for r in runs})
            raise fields["baseline"].error(f"no job or run group {baseline!r}; have: {', '.join(groups)}")
    return Campaign(
        name=name, file=str(path), description=fields["description"].string() if "description" in fields else None,
        logdir=logdir, system=system, baseline=baseline, max_parallel=max_parallel, gpus=gpus,
        runs=tuple(runs), config=root.value(), backend=where, python=python,
    )
