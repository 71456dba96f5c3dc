"""Print every NVML reading of every GPU, the identified peak FLOP/s, and the MFU of a short matmul.

On a machine without an NVIDIA GPU it says why (the same reason the app's GPU
panel shows), prints the host readings and the measured CPU peak, and exits 0.

    python benchmarks/gpu_check.py [--dtype bf16] [--size 8192] [--seconds 5]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from perfwatch.core.measure.peaks import DTYPES, cpu_peak, identify_gpu, peak_for_sample
from perfwatch.core.measure.throughput import mfu_from_rate
from perfwatch.core.telemetry.host import HostSampler
from perfwatch.core.telemetry.nvml import NvmlSampler
from perfwatch.core.telemetry.sampling import GPU_FIELDS, GpuSample

GIB = 1024**3


def fmt(gpu: GpuSample, name: str) -> str:
    value = getattr(gpu, name)
    if value is None:
        return f"N/A ({gpu.reason(name) or 'not reported'})"
    if name in ("mem_used", "mem_total"):
        return f"{value / GIB:.2f} GiB"
    if name == "processes":
        return ", ".join(f"pid {p.pid}: {(p.used_mem or 0) / GIB:.2f} GiB" for p in value) or "none"
    if name == "throttle":
        return ", ".join(value) or "none"
    return str(value)


def print_gpu(gpu: GpuSample) -> None:
    print(f"\nGPU {gpu.index}")
    for name in GPU_FIELDS:
        print(f"  {name:22} {fmt(gpu, name)}")
    watts = gpu.power_default_limit_w or gpu.power_max_limit_w or gpu.power_limit_w
    ident = identify_gpu(gpu.name, gpu.mem_total, watts, gpu.board_part)
    print(f"  {'identified as':22} {ident.model.label if ident.model else '—'}  [{ident.evidence}]")
    for dt in DTYPES:
        peak, why = peak_for_sample(gpu, dt)
        print(f"  peak {dt:17} {peak.flops / 1e12:9.1f} TFLOP/s dense" if peak else f"  peak {dt:17} —  ({why})")
    if ident.model is not None:
        print(f"  {'source':22} {ident.model.source}")


def matmul_mfu(gpu: GpuSample, dtype: str, size: int, seconds: float, sampler: NvmlSampler) -> None:
    import torch

    if not torch.cuda.is_available():
        print("\ntorch sees no CUDA device: skipping the matmul")
        return
    tdtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    dev = torch.device("cuda", 0)
    a = torch.randn(size, size, device=dev, dtype=tdtype)
    b = torch.randn(size, size, device=dev, dtype=tdtype)
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    under_load: list[GpuSample] = []

    def watch() -> None:  # one NVML reading in the middle of the loop
        time.sleep(seconds / 2)
        status = sampler.status()
        if status.available:
            under_load.append(status.gpus[0])

    watcher = threading.Thread(target=watch)
    watcher.start()
    iters = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        iters += 10
    wall = time.perf_counter() - t0
    watcher.join()
    peak, why = peak_for_sample(gpu, dtype)
    m = mfu_from_rate(iters / wall, 2.0 * size**3, peak, 1, flops_source="matmul 2n^3", peak_reason=why)
    print(f"\nmatmul {size}x{size} {dtype} on {torch.cuda.get_device_name(0)}: {iters} in {wall:.2f}s")
    print(f"  achieved {m.achieved_flops_per_s / 1e12:.1f} TFLOP/s" if m.achieved_flops_per_s else "  achieved —")
    print(f"  MFU {m.text()}" + (f"  ({m.reason})" if m.reason else f" of {peak.describe() if peak else '—'}"))
    if under_load:
        g = under_load[0]
        print(f"  during: util {fmt(g, 'util_sm')} %, power {fmt(g, 'power_w')} W, SM {fmt(g, 'sm_clock')} MHz,"
              f" temp {fmt(g, 'temp_c')} C, throttle {fmt(g, 'throttle')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "tf32", "bf16", "fp16"])
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()

    sampler = NvmlSampler()
    try:
        status = sampler.status()
        if not status.available:
            print(f"No NVIDIA GPU here: {status.reason}")
            host = HostSampler()
            time.sleep(0.2)
            h = host.sample().host
            if h is not None:
                print(f"host: {len(h.cpu_per_core)} cores, CPU {h.cpu_percent or 0:.0f} %,"
                      f" memory {(h.mem_used or 0) / GIB:.1f} / {(h.mem_total or 0) / GIB:.1f} GiB")
            peak = cpu_peak("fp32")
            print(f"CPU peak (measured, cached): {peak.describe()}")
            return 0
        print(f"NVIDIA driver {status.driver}, {len(status.gpus)} GPU(s)")
        for gpu in status.gpus:
            print_gpu(gpu)
        matmul_mfu(status.gpus[0], args.dtype, args.size, args.seconds, sampler)
        return 0
    finally:
        sampler.close()


if __name__ == "__main__":
    sys.exit(main())
