"""Peak FLOP/s per accelerator and dtype: the denominator of MFU.

GPU values are *dense* peaks from NVIDIA's datasheets (the sheets print tensor
numbers "with sparsity", twice the dense rate: those are halved here) and each
one carries its source. "fp32" is the non-tensor FP32 rate; "tf32" the TF32
tensor-core rate (what an fp32 model gets with TF32 matmuls allowed).

Identifying the model takes more than the name: "NVIDIA H100 80GB HBM3" is the
SXM5 board and "NVIDIA H100 PCIe" the PCIe one (989 vs 756 dense bf16
TFLOP/s), A100 40 and 80 GB names differ between drivers, and some names carry
no form factor at all. So `identify_gpu` also weighs the memory size and the
board's *default* power limit (its TDP; an admin's cap changes the enforced
limit, not this), and says which evidence decided.

CPU: no table can be right, so the peak is *measured* (measure/host_peak.py): best of N torch
matmuls, cached per CPU model, thread count, torch version and dtype.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

import msgspec

from perfwatch.core.control.peak_values import PEAK_DTYPES, parse_flops

if TYPE_CHECKING:
    from perfwatch.core.telemetry.types import GpuSample

__all__ = [
    "DTYPES", "GPU_MODELS", "GpuModel", "Identification", "PeakFlops", "gpu_peak",
    "identify_gpu", "normalize_dtype", "parse_flops", "peak_for", "peak_for_sample",
]

DTYPES = PEAK_DTYPES  # the table's columns: what a campaign's peak_flops may name
GIB = 1024**3


class PeakFlops(msgspec.Struct, frozen=True):
    """Peak FLOP/s of ONE device for one dtype, and where the number comes from."""

    device: str  # "H100 SXM", "cpu: AMD EPYC 7B13 x 2 threads", "campaign"
    dtype: str
    flops: float  # FLOP/s per device
    source: str
    measured: bool = False
    measured_at: float | None = None  # when a measured peak was measured (epoch seconds)

    def describe(self) -> str:
        kind = "measured" if self.measured else "campaign" if self.device == "campaign" else "datasheet"
        return f"{self.device} {self.dtype}: {self.flops / 1e12:.4g} TFLOP/s ({kind})"


class Identification(msgspec.Struct, frozen=True):
    model: GpuModel | None
    evidence: str  # why this model (or why none)


class GpuModel(msgspec.Struct, frozen=True):
    """A table entry: dense peaks in TFLOP/s per dtype (None = no such hardware path)."""

    key: str
    label: str
    peaks: Mapping[str, float | None]
    source: str
    memory_gb: tuple[int, ...]  # nominal sizes sold
    tdp_w: int  # the board's default power limit


def _m(key: str, label: str, fp32: float, tf32: float | None, bf16: float | None, fp16: float | None,
       fp8: float | None, mem: tuple[int, ...], tdp: int, source: str) -> tuple[str, GpuModel]:
    peaks = MappingProxyType({"fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16, "fp8": fp8})
    return key, GpuModel(key, label, peaks, source, mem, tdp)


_V100 = "NVIDIA V100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/v100)"
_A100 = "NVIDIA A100 datasheet, nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (sparsity figures halved)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (resources.nvidia.com/en-us-tensor-core; sparsity figures halved)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200; sparsity figures halved)"

# key: label, fp32 (non-tensor), tf32, bf16, fp16, fp8 -- dense TFLOP/s
GPU_MODELS: dict[str, GpuModel] = dict([
    _m("v100-sxm2", "V100 SXM2", 15.7, None, None, 125, None, (16, 32), 300, _V100 + ", SXM2 column"),
    _m("v100-pcie", "V100 PCIe", 14, None, None, 112, None, (16, 32), 250, _V100 + ", PCIe column"),
    _m("v100s-pcie", "V100S PCIe", 16.4, None, None, 130, None, (32,), 250, "NVIDIA V100S datasheet"),
    _m("t4", "T4", 8.1, None, None, 65, None, (16,), 70,
       "NVIDIA T4 datasheet (nvidia.com/en-us/data-center/tesla-t4): FP16/FP32 mixed 65 TFLOPS"),
    _m("a10", "A10", 31.2, 62.5, 125, 125, None, (24,), 150,
       "NVIDIA A10 datasheet (nvidia.com/en-us/data-center/products/a10-gpu; sparsity figures halved)"),
    _m("a10g", "A10G", 35, 35, 70, 70, None, (24,), 300,
       "AWS A10G (EC2 G5) specs as tabulated in Baseten, 'NVIDIA A10 vs A10G for ML model inference'"),
    _m("a100-sxm-40", "A100 SXM 40GB", 19.5, 156, 312, 312, None, (40,), 400, _A100 + ", SXM column"),
    _m("a100-sxm-80", "A100 SXM 80GB", 19.5, 156, 312, 312, None, (80,), 400, _A100 + ", SXM column"),
    _m("a100-pcie-40", "A100 PCIe 40GB", 19.5, 156, 312, 312, None, (40,), 250, _A100 + ", PCIe column"),
    _m("a100-pcie-80", "A100 PCIe 80GB", 19.5, 156, 312, 312, None, (80,), 300, _A100 + ", PCIe column"),
    _m("l4", "L4", 30.3, 60, 121, 121, 242.5, (24,), 72,
       "NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4; sparsity figures halved)"),
    _m("l40s", "L40S", 91.6, 183, 362.05, 362.05, 733, (48,), 350,
       "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s; dense column)"),
    _m("h100-sxm", "H100 SXM", 67, 494.5, 989.5, 989.5, 1979, (80,), 700, _H100 + ", H100 SXM column"),
    _m("h100-pcie", "H100 PCIe", 51, 378, 756.5, 756.5, 1513, (80,), 350, _H100 + ", H100 PCIe column"),
    _m("h100-nvl", "H100 NVL", 60, 417.5, 835.5, 835.5, 1670.5, (94,), 400,
       "NVIDIA H100 NVL datasheet (per GPU, not per NVLink pair; sparsity figures halved)"),
    _m("h200-sxm", "H200 SXM", 67, 494.5, 989.5, 989.5, 1979, (141,), 700, _H200 + ", H200 SXM column"),
    _m("h200-nvl", "H200 NVL", 60, 417.5, 835.5, 835.5, 1670.5, (141,), 600, _H200 + ", H200 NVL column"),
    _m("b200", "B200", 75, 1125, 2250, 2250, 4500, (180, 192), 1000,
       "NVIDIA HGX B200 datasheet (8-GPU figures / 8; sparsity figures halved)"),
])


# ---- dtypes ----------------------------------------------------------------------
_DTYPE_ALIASES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "32": "fp32", "32-true": "fp32", "amp_fp32": "fp32",
    "tf32": "tf32", "tfloat32": "tf32",
    "bf16": "bf16", "bfloat16": "bf16", "amp_bf16": "bf16", "bf16-mixed": "bf16", "bf16-true": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "amp_fp16": "fp16", "16-mixed": "fp16",
    "16-true": "fp16", "amp": "fp16",
    "fp8": "fp8", "amp_fp8": "fp8", "float8": "fp8", "fp8_e4m3": "fp8", "e4m3": "fp8", "8-mixed": "fp8",
}


def normalize_dtype(precision: str | None, default: str = "fp32") -> str:
    """A workload's precision label ("amp_bf16", "bf16-mixed", "torch.bfloat16") -> one of DTYPES."""
    if not precision:
        return default
    p = precision.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(p, default if p not in DTYPES else p)


# ---- identification ------------------------------------------------------------
def _by_key(key: str) -> GpuModel:
    return GPU_MODELS[key]


def _form_by_power(watts: float | None, threshold: float) -> str | None:
    if watts is None:
        return None
    return "sxm" if watts >= threshold else "pcie"


def identify_gpu(
    name: str | None,
    mem_total: int | None = None,
    power_limit_w: float | None = None,
    board_part: str | None = None,
) -> Identification:
    """The table entry for a GPU as NVML describes it.

    `power_limit_w` should be the board's default limit (NVML
    PowerManagementDefaultLimit, or the max constraint), not the enforced one.
    """
    if not name:
        return Identification(None, "no GPU name")
    n = name.lower().replace("_", " ")
    mem_gib = mem_total / GIB if mem_total else None
    watts = power_limit_w
    facts = []  # board part numbers are shown for the record; name, memory and power decide
    if board_part:
        facts.append(f"board {board_part}")
    if mem_gib is not None:
        facts.append(f"{mem_gib:.0f} GiB")
    if watts is not None:
        facts.append(f"{watts:.0f} W default limit")
    why = f"name {name!r}" + (f" + {', '.join(facts)}" if facts else "")

    def pick(key: str, how: str) -> Identification:
        return Identification(_by_key(key), f"{why}: {how}")

    if re.search(r"\bb200\b", n):
        return pick("b200", "B200 by name")
    if re.search(r"\bh200\b", n):
        if "nvl" in n or (watts is not None and watts <= 650):
            return pick("h200-nvl", "NVL by name" if "nvl" in n else "NVL by power limit <= 650 W")
        return pick("h200-sxm", "SXM by name and power limit")
    if re.search(r"\bh100\b", n):
        if "nvl" in n or (mem_gib is not None and 90 <= mem_gib < 100):
            return pick("h100-nvl", "NVL by name" if "nvl" in n else "NVL by 94 GB memory")
        if "pcie" in n:
            return pick("h100-pcie", "PCIe by name")
        if "sxm" in n:
            return pick("h100-sxm", "SXM by name")
        form = _form_by_power(watts, 500)
        if form is not None:
            return pick(f"h100-{form}", f"{form.upper() if form == 'sxm' else 'PCIe'} by power limit")
        if "hbm3" in n:  # the SXM5 board's name; PCIe boards carry HBM2e
            return pick("h100-sxm", "SXM by 'HBM3' in name (no power limit known)")
        return Identification(None, f"{why}: H100 form factor unknown (need the power limit)")
    if re.search(r"\ba100\b", n):
        size = "80" if "80gb" in n or (mem_gib is not None and mem_gib > 60) else "40"
        if "pcie" in n:
            form, how = "pcie", "PCIe by name"
        elif "sxm" in n:
            form, how = "sxm", "SXM by name"
        else:
            by_power = _form_by_power(watts, 350)
            if by_power is None:
                return Identification(None, f"{why}: A100 form factor unknown (need the power limit)")
            form, how = by_power, "by power limit"
        return pick(f"a100-{form}-{size}", f"{how}, {size} GB by memory/name")
    if re.search(r"\ba10g\b", n):
        return pick("a10g", "A10G by name")
    if re.search(r"\ba10\b", n):
        return pick("a10", "A10 by name")
    if re.search(r"\bl40s\b", n):
        return pick("l40s", "L40S by name")
    if re.search(r"\bl4\b", n):
        return pick("l4", "L4 by name")
    if re.search(r"\bt4\b", n):
        return pick("t4", "T4 by name")
    if re.search(r"\bv100s\b", n):
        return pick("v100s-pcie", "V100S by name")
    if re.search(r"\bv100\b", n):
        if "sxm" in n:
            return pick("v100-sxm2", "SXM2 by name")
        if "pcie" in n:
            return pick("v100-pcie", "PCIe by name")
        if "fhhl" in n:
            return Identification(None, f"{why}: V100 FHHL (150 W, lower clocks) is not in the table")
        form = _form_by_power(watts, 280)
        if form is not None:
            return pick("v100-sxm2" if form == "sxm" else "v100-pcie", "by power limit")
        return Identification(None, f"{why}: V100 form factor unknown (need the power limit)")
    return Identification(None, f"{why}: not in perfwatch's peak table (set peak_flops in the campaign)")


def gpu_peak(model: GpuModel, dtype: str) -> PeakFlops | None:
    """The model's dense peak for `dtype`, or None where the hardware has no such path (bf16 on V100)."""
    tflops = model.peaks.get(dtype)
    if tflops is None:
        return None
    return PeakFlops(model.label, dtype, tflops * 1e12, model.source)


def peak_for(
    name: str | None,
    dtype: str,
    *,
    mem_total: int | None = None,
    power_limit_w: float | None = None,
    board_part: str | None = None,
) -> tuple[PeakFlops | None, str]:
    """Peak for a GPU as NVML reports it, plus the reason when there is none."""
    ident = identify_gpu(name, mem_total, power_limit_w, board_part)
    if ident.model is None:
        return None, ident.evidence
    peak = gpu_peak(ident.model, dtype)
    if peak is None:
        return None, f"{ident.model.label} has no {dtype} peak (no such hardware path)"
    return peak, ident.evidence


def peak_for_sample(gpu: GpuSample, dtype: str) -> tuple[PeakFlops | None, str]:
    """Peak for a GPU as the NvmlSampler saw it (default power limit preferred over the enforced one)."""
    watts = gpu.power_default_limit_w or gpu.power_max_limit_w or gpu.power_limit_w
    return peak_for(gpu.name, dtype, mem_total=gpu.mem_total, power_limit_w=watts, board_part=gpu.board_part)
