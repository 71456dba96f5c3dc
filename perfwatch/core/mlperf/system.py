"""The MLPerf system description (`systems/<system>.json`), filled from this host as far as it can be known.

The list of required fields is read from `mlperf_logging.system_desc_checker`
itself (the `required_fields` literal in its source), so a newer checker that
asks for more fields gets them, empty and listed. Nothing here guesses: a value
the host cannot tell (interconnects, cooling, storage type...) stays "" and is
named in `unknown`, which `perfwatch package` prints.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import platform
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

# what the checker asked for in mlperf-logging 4.1.68, used only if its source cannot be read
_FALLBACK_FIELDS = (
    "submitter", "division", "status", "system_name", "number_of_nodes", "host_processors_per_node",
    "host_processor_model_name", "host_processor_core_count", "host_processor_vcpu_count",
    "host_processor_frequency", "host_processor_caches", "host_processor_interconnect", "host_memory_capacity",
    "host_storage_type", "host_storage_capacity", "host_networking", "host_networking_topology",
    "host_memory_configuration", "accelerators_per_node", "accelerator_model_name",
    "accelerator_host_interconnect", "accelerator_frequency", "accelerator_on-chip_memories",
    "accelerator_memory_configuration", "accelerator_memory_capacity", "accelerator_interconnect",
    "accelerator_interconnect_topology", "cooling", "hw_notes", "framework", "other_software_stack",
    "operating_system", "sw_notes",
)
# the checker accepts only these status strings from ruleset 4.0 on
STATUS_NAMES = {
    "onprem": "Available on-premise",
    "cloud": "Available cloud",
    "preview": "Preview",
    "research": "Research, Development, or Internal (RDI)",
}


def required_fields() -> tuple[str, ...]:
    """`required_fields` as the installed system_desc_checker defines it."""
    try:
        from mlperf_logging.system_desc_checker import system_desc_checker as sdc

        tree = ast.parse(inspect.getsource(sdc.check_system_desc))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "required_fields"
                                                     for t in node.targets)):
                value = ast.literal_eval(node.value)
                if isinstance(value, list) and all(isinstance(v, str) for v in value):
                    return tuple(value)
    except (ImportError, OSError, TypeError, ValueError, SyntaxError):
        pass
    return _FALLBACK_FIELDS


def status_value(status: str, ruleset: str) -> str:
    """`onprem` → "Available on-premise" for rulesets ≥ 4.0 (older ones took the short word)."""
    try:
        major = int(ruleset.split(".")[0])
    except ValueError:
        major = 99
    return STATUS_NAMES.get(status, status) if major >= 4 else status


def _gb(n: float) -> str:
    return f"{n / 1e9:.0f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _cpuinfo() -> tuple[str, int | None, str]:
    """(model name, sockets, current MHz) from /proc/cpuinfo."""
    model, sockets, mhz = "", set(), ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "model name" and not model:
                    model = value.strip()
                elif name == "physical id":
                    sockets.add(value.strip())
                elif name == "cpu MHz" and not mhz:
                    mhz = value.strip()
    except OSError:
        pass
    return model or platform.processor(), (len(sockets) or None), mhz


def _caches() -> str:
    parts = []
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        parts.append(f"L{level}{suffix}: {size}")
    return ", ".join(parts)


def _os_name() -> str:
    pretty = ""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                pretty = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    kernel = f"{platform.system()} {platform.release()}".strip()
    return f"{pretty} ({kernel})" if pretty else kernel


def _pkg(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class Gpu:
    name: str
    count: int
    memory_bytes: int | None
    max_clock_mhz: int | None
    driver: str | None


def nvml_gpus() -> Gpu | None:
    """The first GPU model and how many there are (None without NVML or GPUs; never raises)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count < 1:
            return None
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else str(name)
        mem = clock = driver = None
        try:
            mem = int(pynvml.nvmlDeviceGetMemoryInfo(h).total)
            clock = int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
            d = pynvml.nvmlSystemGetDriverVersion()
            driver = d.decode() if isinstance(d, bytes) else str(d)
        except Exception:
            pass
        return Gpu(name, count, mem, clock, driver)
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


@dataclass(frozen=True, slots=True)
class SystemDescription:
    fields: dict[str, Any]
    unknown: tuple[str, ...]  # required fields left "" because this host cannot tell


def describe_host(*, submitter: str, division: str, status: str, system_name: str, ruleset: str,
                  storage_path: str | Path = ".", gpu: Gpu | None = None, accelerators: int | None = None,
                  device_name: str | None = None) -> SystemDescription:
    """Every required field; measured where possible, "" (and listed) where not."""
    model, sockets, mhz = _cpuinfo()
    freq = psutil.cpu_freq()
    if freq and freq.max:
        frequency = f"{freq.max:.0f} MHz"
    else:
        frequency = f"{float(mhz):.0f} MHz" if mhz.replace(".", "", 1).isdigit() else ""
    torch_version = _pkg("torch")
    try:
        storage = _gb(psutil.disk_usage(str(storage_path)).total)
    except OSError:
        storage = ""
    n_acc = accelerators if accelerators is not None else (gpu.count if gpu else 0)
    software: dict[str, str] = {"python": sys.version.split()[0]}
    for pkg in ("perfwatch", "mlperf-logging", "torch"):
        v = _pkg(pkg)
        if v:
            software[pkg] = v
    if gpu and gpu.driver:
        software["nvidia_driver"] = gpu.driver
    known: dict[str, Any] = {
        "submitter": submitter,
        "division": division,
        "status": status_value(status, ruleset),
        "system_name": system_name,
        "number_of_nodes": "1",
        "host_processors_per_node": str(sockets) if sockets else "",
        "host_processor_model_name": model,
        "host_processor_core_count": str(psutil.cpu_count(logical=False) or ""),
        "host_processor_vcpu_count": str(os.cpu_count() or ""),
        "host_processor_frequency": frequency,
        "host_processor_caches": _caches(),
        "host_memory_capacity": _gb(psutil.virtual_memory().total),
        "host_storage_capacity": storage,
        "accelerators_per_node": str(n_acc),
        "accelerator_model_name": (gpu.name if gpu else device_name) or "",
        "accelerator_frequency": f"{gpu.max_clock_mhz} MHz" if gpu and gpu.max_clock_mhz else "",
        "accelerator_memory_capacity": _gb(gpu.memory_bytes) if gpu and gpu.memory_bytes else "",
        "framework": f"PyTorch {torch_version}" if torch_version else "",
        "other_software_stack": software,
        "operating_system": _os_name(),
        "hw_notes": "" if n_acc else "CPU only: no accelerator",
        "sw_notes": "system description generated by perfwatch from the host; fields left empty were unknown",
    }
    fields = {name: known.get(name, "") for name in required_fields()}
    if not n_acc:  # not unknown, just absent: say so instead of leaving blanks
        for name in fields:
            if name.startswith("accelerator_") and fields[name] == "":
                fields[name] = "N/A"
    unknown = tuple(name for name, value in fields.items() if value == "")
    return SystemDescription(fields, unknown)
