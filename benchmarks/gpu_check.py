"""Print every NVML reading of every GPU, the identified peak FLOP/s, the MFU and energy of a short
matmul, the NVML sampler's cost, and perfwatch's instrumentation overhead inside a GPU training step.

Every number is printed with the device it was measured on (`[NVIDIA H100 80GB HBM3]`), so the
GPU lines of benchmarks/RESULTS.md can be filled from this output as it is. On a machine without an NVIDIA GPU it says
why (the same reason the app's GPU panel shows), prints the host readings and the measured CPU peak,
and exits 0.

    python benchmarks/gpu_check.py [--dtype bf16] [--size 8192] [--seconds 5] [--steps 200]

Instrumentation overhead (P6: <= 1 %, no device sync per step): the MLP workload at `--preset gpu`
is trained step by step on GPU 0, alternating blocks of steps with perfwatch's per-step work
(`ThroughputMeter.step` + an mllog `tracked_stats` record per second, written to a temp file) and
without it; the device is synchronised only at block ends. Synchronising CUDA calls inside the
instrumented steps are counted with `torch.cuda.set_sync_debug_mode("warn")`: the one `.item()` per
written record is expected, anything per step is a bug.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from perfwatch.core.measure.energy import gpu_energy
from perfwatch.core.measure.host_peak import cpu_peak
from perfwatch.core.measure.mfu import mfu_from_rate
from perfwatch.core.measure.peaks import DTYPES, identify_gpu, peak_for_sample
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
    readings: list[tuple[float, int | None, float | None]] = []  # (time, energy_mj, power_w) of GPU 0
    done = threading.Event()

    def read() -> None:
        status = sampler.status()
        if status.available:
            g = status.gpus[0]
            readings.append((time.time(), g.energy_mj, g.power_w))
            if len(readings) == max(2, int(seconds)):
                under_load.append(g)

    def watch() -> None:  # NVML readings every 0.5 s through the loop: power, energy counter, clocks
        read()
        while not done.wait(0.5):
            read()
        read()

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
    done.set()
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
    if len(readings) >= 2:
        counter = gpu_energy([{"time": t, "gpus": [{"index": 0, "energy_mj": e}]} for t, e, _ in readings])
        power = gpu_energy([{"time": t, "gpus": [{"index": 0, "power_w": w}]} for t, _, w in readings])
        name = torch.cuda.get_device_name(0)
        for label, e in (("energy counter", counter), ("power x time, 1 Hz-style", power)):
            if e is not None:
                tflop = iters * 2.0 * size**3 / 1e12
                print(f"  energy ({label}): {e.joules:.0f} J over {e.covered_s:.1f} s = {tflop / e.joules:.2f} TFLOP/J"
                      f"  [{name}]")


def sampler_cost(sampler: NvmlSampler, ticks: int = 50) -> None:
    """Wall and CPU time of one NVML sample of every GPU (what the 1 Hz telemetry thread pays), then of
    each NVML call in it: where a tick's time goes."""
    status = sampler.status()
    names = ", ".join(sorted({g.name or "?" for g in status.gpus}))
    sampler.sample()  # static fields are read once: measure the steady state
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(ticks):
        sampler.sample()
    wall = (time.perf_counter() - w0) / ticks
    cpu = (time.process_time() - c0) / ticks
    print(f"\nNVML sampler: {wall * 1e3:.2f} ms wall, {cpu * 1e3:.2f} ms CPU per sample of {len(status.gpus)} GPU(s)"
          f" = {cpu * 100:.2f} % of a core at 1 Hz  [{names}]")
    nvml_call_costs(names)


def nvml_call_costs(names: str, calls: int = 50) -> None:
    """CPU time of each NVML call the sampler makes per GPU and tick, on GPU 0: where a tick's cost goes."""
    import pynvml as nv

    nv.nvmlInit()
    try:
        h = nv.nvmlDeviceGetHandleByIndex(0)
        reads: dict[str, Any] = {
            "utilization": lambda: nv.nvmlDeviceGetUtilizationRates(h),
            "memory": lambda: nv.nvmlDeviceGetMemoryInfo(h),
            "compute processes": lambda: nv.nvmlDeviceGetComputeRunningProcesses(h),
            "graphics processes": lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(h),
            "power": lambda: nv.nvmlDeviceGetPowerUsage(h),
            "enforced power limit": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h),
            "temperature": lambda: nv.nvmlDeviceGetTemperature(h, 0),
            "sm clock": lambda: nv.nvmlDeviceGetClockInfo(h, 1),
            "mem clock": lambda: nv.nvmlDeviceGetClockInfo(h, 2),
            "clock event reasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
            "total energy": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
        }
        print(f"NVML calls, CPU per call on GPU 0 over {calls} calls  [{names}]")
        for label, read in reads.items():
            try:
                read()
            except Exception as exc:  # a field this board lacks
                print(f"  {label:22s} unavailable: {type(exc).__name__}")
                continue
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(calls):
                read()
            print(f"  {label:22s} {(time.process_time() - c0) / calls * 1e3:7.3f} ms CPU"
                  f"  {(time.perf_counter() - w0) / calls * 1e3:7.3f} ms wall")
    finally:
        nv.nvmlShutdown()


def _load_workload(name: str) -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "workloads" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"workload_{name}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def step_overhead(steps: int, rounds: int = 6) -> None:
    """perfwatch's per-step work inside a GPU training step: A/B blocks, unit costs, syncs per step."""
    import tempfile
    import warnings

    import torch

    from perfwatch.instrument import harness, hparams
    from perfwatch.instrument.mllogger import MLPerfLogger
    from perfwatch.instrument.throughput import ThroughputMeter

    if not torch.cuda.is_available():
        print("\ntorch sees no CUDA device: skipping the instrumentation overhead")
        return
    mlp = _load_workload("mlp")
    args = hparams.parse_with_config(mlp.parser(), ["--preset", "gpu", "--device", "cuda", "--no-flops"])
    s = harness.prepare(args, mlp.build, harness.runtime.DistInfo(0, 1, 0, 1))
    name = torch.cuda.get_device_name(s.device)
    order = harness.epoch_order(s, 1)
    per_epoch = s.steps_per_epoch
    k = [0]

    def step() -> torch.Tensor:
        loss = harness.optimizer_step(s, harness.micro_batches(s, order, k[0] % per_epoch))
        k[0] += 1
        return loss

    with tempfile.TemporaryDirectory() as tmp:
        log = MLPerfLogger(f"{tmp}/mllog.txt", rank=0)
        meter = ThroughputMeter(log, interval_s=1.0)
        for _ in range(20):  # warm-up: kernels chosen, allocator settled
            step()
        torch.cuda.synchronize()
        bare: list[float] = []
        instr: list[float] = []
        syncs = {True: 0, False: 0}  # synchronising calls counted in instrumented / bare blocks
        for _ in range(rounds):
            for instrumented in (False, True):
                records = meter.records
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    torch.cuda.set_sync_debug_mode("warn")
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        loss = step()
                        if instrumented:
                            meter.step(s.global_batch, loss)
                    torch.cuda.set_sync_debug_mode("default")
                    torch.cuda.synchronize()
                    (instr if instrumented else bare).append((time.perf_counter() - t0) / steps)
                found = sum("synchroniz" in str(w.message) for w in caught)
                syncs[instrumented] += found - (meter.records - records)  # minus the .item() per record
        log.close()
        # unit costs on the host: one meter.step, one mllog record
        t0 = time.perf_counter()
        n = 100_000
        cheap = ThroughputMeter(log, interval_s=1e9)
        for _ in range(n):
            cheap.step(1)
        unit_step = (time.perf_counter() - t0) / n
        rec_log = MLPerfLogger(f"{tmp}/unit.txt", rank=0)
        t0 = time.perf_counter()
        for i in range(200):
            rec_log.event("tracked_stats", {"throughput": 1.0}, {"step": i})
        unit_rec = (time.perf_counter() - t0) / 200
        rec_log.close()
    b, m = min(bare), min(instr)
    unit = unit_step / b + unit_rec / 1.0  # a clock read per step, one record per second
    print(f"\ninstrumentation inside a GPU step (mlp --preset gpu, batch {s.global_batch}, {s.args.precision})  [{name}]")
    print(f"  step {b * 1e3:.2f} ms bare, {m * 1e3:.2f} ms instrumented (best of {rounds} blocks of {steps}):"
          f" A/B {100 * (m - b) / b:+.2f} %")
    print(f"  unit costs: meter.step {unit_step * 1e6:.2f} us, one mllog record {unit_rec * 1e6:.0f} us per second"
          f" -> {100 * unit:.4f} % of a step (P6 <= 1 %)")
    extra = (syncs[True] - syncs[False]) / (rounds * steps)
    print(f"  synchronising CUDA calls per step added by perfwatch (beyond one .item() per record): {extra:.3f}"
          f" (the training step itself: {syncs[False] / (rounds * steps):.3f})  [{name}]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "tf32", "bf16", "fp16"])
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--steps", type=int, default=200, help="steps per A/B block of the overhead measurement")
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
        sampler_cost(sampler)
        step_overhead(args.steps)
        return 0
    finally:
        sampler.close()


if __name__ == "__main__":
    sys.exit(main())
