"""`perfwatch package`: runs under a LOGDIR -> an MLPerf submission folder.

Layout (MLPerf Training, as Composer's MLPerfCallback also writes it):

    OUT/results/<system>/<benchmark>/result_N.txt   one per run, N = repetition (0, 1, ...)
    OUT/systems/<system>.json                       every field system_desc_checker requires

Result files are byte copies of the run logs: a submission is the logs as the
runs wrote them. Repetitions of one result are runs of one configuration: in a
perfwatch LOGDIR a job's grid point (perfwatch.json's `group`: the run id less
its `.rN`), in a results tree a system's benchmark folder. When a benchmark was
run in several configurations, each gets its own system, `<system>_<label>`
(the grid point's label, else the job or the source system), with its own
systems/<system>.json: configurations are never mixed as repetitions. Two rules protect the user (R7):
- nothing is written outside OUT whatever the logs or options say: every path
  component is reduced to `[A-Za-z0-9._+-]` without a leading dot, every folder
  is checked to resolve inside OUT (a symlink planted in OUT is refused), and
  files are opened with O_EXCL | O_NOFOLLOW;
- an existing result file is never overwritten (a known source of invalid
  submissions: runs of two campaigns mixed in one folder). The whole plan is
  checked before the first byte is written.
An existing systems/<system>.json is kept (it may have been completed by hand).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from perfwatch.core import keys
from perfwatch.core.control import registry
from perfwatch.core.mlperf.checker import CheckResult, check_file, ruleset_for
from perfwatch.core.mlperf.package_checks import Verdict, check_package, check_system_json
from perfwatch.core.mlperf.system import Gpu, describe_host, nvml_gpus
from perfwatch.core.model import book as runbook
from perfwatch.core.model.run import RunView

DIVISIONS = ("open", "closed")
STATUSES = ("onprem", "cloud", "preview", "research")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


class PackageError(Exception):
    """A clear reason why nothing was written."""


def safe_component(name: object, fallback: str) -> str:
    """One path component that cannot leave its folder: no separators, NUL, `..` or hidden names."""
    text = _UNSAFE.sub("_", str(name))[:128].lstrip(".")
    return text or fallback


@dataclass(frozen=True, slots=True)
class Placed:
    run_id: str
    source: str
    benchmark: str
    dest: str  # relative to OUT, posix


@dataclass(slots=True)
class PackageResult:
    out: Path
    system: str
    ruleset: str
    division: str
    placed: list[Placed]
    system_json: str
    system_json_written: bool
    unknown_fields: tuple[str, ...]
    notes: list[str] = field(default_factory=list)
    compliance: list[CheckResult] = field(default_factory=list)
    system_check: Verdict | None = None
    package_check: Verdict | None = None
    systems: list[str] = field(default_factory=list)  # one per configuration (see module docstring)

    @property
    def passed(self) -> bool:
        ok = all(c.passed for c in self.compliance)
        ok = ok and (self.system_check is None or self.system_check.passed is not False)
        return ok and (self.package_check is None or self.package_check.passed is not False)

    def to_json(self) -> dict[str, object]:
        def verdict(v: Verdict | None) -> dict[str, object] | None:
            return None if v is None else {"passed": v.passed, "command": v.command, "log": list(v.lines)}
        return {
            "out": str(self.out), "system": self.system, "systems": self.systems or [self.system],
            "ruleset": self.ruleset, "division": self.division,
            "results": [{"run_id": p.run_id, "source": p.source, "benchmark": p.benchmark, "file": p.dest}
                        for p in self.placed],
            "system_json": self.system_json, "system_json_written": self.system_json_written,
            "unknown_fields": list(self.unknown_fields), "notes": self.notes,
            "compliance": [{"file": p.dest, "passed": c.passed, "messages": list(c.messages), "error": c.error}
                           for p, c in zip(self.placed, self.compliance, strict=False)],
            "system_desc_checker": verdict(self.system_check), "package_checker": verdict(self.package_check),
            "passed": self.passed,
        }


def default_system_name(views: list[RunView], gpu: Gpu | None) -> str:
    """`<N>x<device>_perfwatch` like Composer's `<world_size>x<device>_composer`."""
    sizes = [v.world_size for v in views if v.world_size]
    n = max(sizes) if sizes else (gpu.count if gpu else 1)
    devices = Counter(str(v.params.get(keys.DEVICE)) for v in views if v.params.get(keys.DEVICE))
    device = devices.most_common(1)[0][0] if devices else (gpu.name if gpu else "cpu")
    if device.lower() == "cpu":
        device = "CPU"
    elif device.lower() in ("cuda", "gpu"):
        device = gpu.name if gpu else "GPU"
    return safe_component(f"{n}x{device.replace(' ', '_')}_perfwatch", "system_perfwatch")


def _runs(logdir: Path, notes: list[str]) -> list[RunView]:
    book = runbook.load(logdir)
    keep = []
    for v in book.views():
        if not v.benchmark:
            notes.append(f"skipped {v.run_id}: no submission_benchmark in its log")
        elif v.run_stop_ms is None:
            notes.append(f"skipped {v.run_id}: no run_stop (still running, or it crashed)")
        else:
            keep.append(v)
    return keep


def _inside(out_real: str, path: Path) -> None:
    real = os.path.realpath(path)
    if os.path.commonpath([out_real, real]) != out_real:
        raise PackageError(f"{path} resolves outside --out ({real}); refusing to write there")


def _write_new(out: Path, rel: tuple[str, ...], data: bytes) -> None:
    out_real = os.path.realpath(out)
    folder = out
    for part in rel[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise PackageError(f"{folder} is a symlink; refusing to write through it")
        folder.mkdir(exist_ok=True)
        _inside(out_real, folder)
    target = folder / rel[-1]
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def package(logdir: str | Path, out: str | Path, *, submitter: str, system: str | None = None,
            division: str | None = None, status: str | None = None, ruleset: str | None = None,
            run_checks: bool = True) -> PackageResult:
    """Write the submission folder; raises PackageError (having written nothing) when it cannot."""
    logdir, out = Path(logdir), Path(out)
    if not logdir.exists():
        raise PackageError(f"{logdir}: no such file or folder")
    if out.is_symlink() and not out.exists():
        raise PackageError(f"--out {out} is a symlink to {os.readlink(out)}, which does not exist")
    if out.exists() and not out.is_dir():
        raise PackageError(f"--out {out} exists and is not a folder")
    if logdir.is_dir() and os.path.realpath(out).startswith(os.path.realpath(logdir) + os.sep):
        raise PackageError(f"--out {out} is inside {logdir}: the next report would count every run twice; "
                           "put the submission folder elsewhere")
    notes: list[str] = []
    views = _runs(logdir, notes)
    if not views:
        raise PackageError(f"no finished run with a benchmark under {logdir}" + (f" ({notes[0]})" if notes else ""))
    reg = registry.read(logdir)
    reg_system = reg.system if reg is not None else {}
    if not isinstance(reg_system, dict):
        reg_system = {}
    division = division or _str(reg_system.get("division")) or _logged(views, "division") or "open"
    status = status or _str(reg_system.get("status")) or _logged(views, "submission_status") or "onprem"
    if division not in DIVISIONS:
        raise PackageError(f"division must be one of {', '.join(DIVISIONS)}, not {division!r}")
    if status not in STATUSES:
        raise PackageError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
    gpu = nvml_gpus()
    wanted = system or (_str(reg_system.get("name")) if reg_system.get("name") not in (None, "auto") else None)
    sys_name = safe_component(wanted, "system") if wanted else default_system_name(views, gpu)
    if wanted and sys_name != wanted:
        notes.append(f"system name {wanted!r} written as {sys_name!r} (path-safe characters only)")
    rs = ruleset or ruleset_for(Path(views[0].path), views[0].benchmark, None, views[0].dated_ms)
    config_of, labels = configurations(views, reg)
    per_bench: dict[str, set[str]] = {}
    for v in views:
        per_bench.setdefault(str(v.benchmark), set()).add(config_of[v.run_id])
    systems: dict[str, str] = {}  # configuration -> system name
    for bench, configs in sorted(per_bench.items()):
        for config in sorted(configs):
            name = sys_name if len(configs) == 1 else safe_component(f"{sys_name}_{labels[config]}", sys_name)
            systems.setdefault(config, name)
        if len(configs) > 1:
            notes.append(f"{bench} ran in {len(configs)} configurations, each packaged as its own system: "
                         + ", ".join(f"{labels[c]} -> {systems[c]}" for c in sorted(configs)))

    # plan every file first: refuse before writing anything
    placed: list[Placed] = []
    counters: Counter[tuple[str, str]] = Counter()
    for v in sorted(views, key=lambda v: (v.benchmark or "", config_of[v.run_id], _natural(v.run_id))):
        system_name = systems[config_of[v.run_id]]
        bench = safe_component(v.benchmark, "benchmark")
        if bench != v.benchmark:
            notes.append(f"benchmark {v.benchmark!r} of {v.run_id} written as {bench!r}")
        for key, value in (("division", division), ("org", submitter)):
            logged = v.division if key == "division" else v.org
            if logged and logged != value:
                notes.append(f"{v.run_id} logs submission_{key} {logged!r} but the package says {value!r}")
        n = counters[system_name, bench]
        counters[system_name, bench] += 1
        placed.append(Placed(v.run_id, v.path, bench, f"results/{system_name}/{bench}/result_{n}.txt"))
    clashes = [p.dest for p in placed if (out / p.dest).exists() or (out / p.dest).is_symlink()]
    if clashes:
        raise PackageError("refusing to overwrite existing result files: " + ", ".join(clashes)
                           + " (package into an empty --out, or move them away)")
    used = sorted({p.dest.split("/")[1] for p in placed})
    sys_rels = [f"systems/{name}.json" for name in used]
    sys_rel = sys_rels[0]

    out.mkdir(parents=True, exist_ok=True)
    for p in placed:
        try:
            data = Path(p.source).read_bytes()
        except OSError as exc:
            raise PackageError(f"cannot read {p.source}: {exc.strerror}") from exc
        _write_new(out, tuple(p.dest.split("/")), data)
    logged_device = Counter(str(v.params.get(keys.DEVICE) or "") for v in views).most_common(1)[0][0]
    written_any = False
    unknown: tuple[str, ...] = ()
    for name, rel in zip(used, sys_rels, strict=True):
        desc = describe_host(submitter=submitter, division=division, status=status, system_name=name,
                             ruleset=rs, storage_path=out, gpu=gpu,
                             accelerators=None if gpu or _on_cpu(views) else max(v.world_size or 1 for v in views),
                             device_name=logged_device if logged_device.lower() not in ("", "cpu", "cuda") else None)
        unknown = desc.unknown
        if not (out / rel).exists():
            _write_new(out, tuple(rel.split("/")), (json.dumps(desc.fields, indent=4) + "\n").encode())
            written_any = written_any or rel == sys_rel  # the first system's file (PackageResult.system_json)
        else:
            notes.append(f"kept the existing {rel}")
    result = PackageResult(out, used[0], rs, division, placed, sys_rel, written_any, unknown, notes)
    result.systems = used
    if run_checks:
        result.compliance = [check_file(out / p.dest, ruleset=rs) for p in placed]
        checks = [check_system_json(out / rel, rs) for rel in sys_rels]
        failed = next((c for c in checks if c.passed is False), None)
        result.system_check = failed or checks[0]
        unsafe = [p.dest for p, c in zip(placed, result.compliance, strict=True) if (c.error or "").startswith("not run:")]
        if unsafe:  # the package checker would run the compliance checker on them: never
            result.package_check = Verdict("package_checker", False, (
                "not run: " + ", ".join(unsafe) + " name rule files outside the checker's package",), "")
        else:
            result.package_check = check_package(out, rs, {p.benchmark for p in placed})
    return result


def configurations(views: list[RunView], reg: registry.Registry | None) -> tuple[dict[str, str], dict[str, str]]:
    """Each run's configuration key, and a short label per configuration for the system name suffix.

    A launched run: its perfwatch.json `group` (job + grid point), labelled by the grid point
    (`bs64_lr0.1`), else the job name. Any other run: its results folder, labelled by the system
    folder above the benchmark (`8xA100_80GB-methods`), else the folder.
    """
    from perfwatch.core.results.comparison import row_of
    from perfwatch.core.results.summary import group_of

    records = {r.run_id: r for r in reg.runs} if reg is not None else {}
    config_of: dict[str, str] = {}
    labels: dict[str, str] = {}
    for v in views:
        rec = records.get(v.run_id)
        if rec is not None:
            key = rec.group or group_of(v)
            label = key[len(rec.job) + 1:] if rec.job and key.startswith(rec.job + ".") else (rec.job or key)
        else:
            key = group_of(v)
            label = row_of(key, v.benchmark)
        config_of[v.run_id] = key
        labels.setdefault(key, label.replace("/", "_") or "default")
    return config_of, labels


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", text) if t)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _logged(views: list[RunView], what: str) -> str | None:
    for v in views:
        value = v.division if what == "division" else v.submission_status
        if value:
            return value
    return None


def _on_cpu(views: list[RunView]) -> bool:
    return all(str(v.params.get(keys.DEVICE, "cpu")).lower() == "cpu" for v in views)
