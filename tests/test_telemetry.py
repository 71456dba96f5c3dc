"""GPU telemetry through the real NvmlSampler code (scripted NVML), and the no-GPU path of this machine."""

from __future__ import annotations

import pytest

from perfwatch.core.telemetry.fake import FIELD_FUNCTIONS, FakeGpu, FakeSampler
from perfwatch.core.telemetry.nvml import NvmlSampler, decode_throttle
from perfwatch.core.telemetry.sampling import GPU_FIELDS, GpuSample

GIB = 1024**3


def only_gpu(sampler: FakeSampler, index: int = 0) -> GpuSample:
    snap = sampler.sample()
    assert snap.gpu is not None and snap.gpu.available
    return snap.gpu.gpus[index]


def test_real_nvml_on_a_machine_without_nvidia_driver_says_why() -> None:
    sampler = NvmlSampler()
    try:
        status = sampler.sample().gpu
        assert status is not None
        if status.available:
            pytest.skip("this machine has an NVIDIA driver")
        assert status.gpus == ()
        assert status.reason == "NVML library not found: no NVIDIA driver on this machine"
        assert sampler.sample().gpu == status  # asking again neither raises nor changes the answer
    finally:
        sampler.close()


def test_missing_library_is_not_retried_every_second() -> None:
    sampler = FakeSampler(init_error="LibraryNotFound")
    for _ in range(3):
        status = sampler.sample().gpu
        assert status is not None and not status.available
    assert sampler.fake.init_calls == 1


def test_driver_not_loaded_reason() -> None:
    status = FakeSampler(init_error="DriverNotLoaded").sample().gpu
    assert status is not None and not status.available
    assert "driver not loaded" in (status.reason or "")


def test_every_reading_of_a_healthy_gpu() -> None:
    gpu = FakeGpu(
        compute_procs=[(4242, 30 * GIB), (4343, 2 * GIB)],
        graphics_procs=[(4242, 1 * GIB)],
        throttle_mask=0x4 | 0x40,
    )
    g = only_gpu(FakeSampler([gpu]))
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert g.uuid == gpu.uuid
    assert g.bus_id == "00000000:18:00.0"  # bytes from NVML decoded
    assert (g.util_sm, g.util_mem) == (97.0, 61.0)
    assert (g.mem_used, g.mem_total) == (60 * GIB, 81559 * 1024**2)
    assert (g.power_w, g.power_limit_w, g.power_default_limit_w) == (612.0, 700.0, 700.0)  # mW -> W
    assert g.temp_c == 67.0
    assert (g.sm_clock, g.mem_clock) == (1980, 2619)
    assert g.throttle == ("sw_power_cap", "hw_thermal_slowdown")
    assert g.processes is not None
    assert [(p.pid, p.used_mem) for p in g.processes] == [(4242, 31 * GIB), (4343, 2 * GIB)]
    assert dict(g.unavailable) == {}


@pytest.mark.parametrize("field", sorted(FIELD_FUNCTIONS))
def test_one_failing_field_is_na_with_a_reason_and_nothing_else_is(field: str) -> None:
    sampler = FakeSampler([FakeGpu(compute_procs=[(7, GIB)])])
    sampler.fail(field)
    g = only_gpu(sampler)
    assert getattr(g, field) is None
    assert g.reason(field) == "not supported by this GPU or driver"
    # fields read by the same NVML call fail with it (util_sm/util_mem, sm/mem clock, used/total memory)
    partners = {f for f, fn in FIELD_FUNCTIONS.items() if fn == FIELD_FUNCTIONS[field]}
    for other in GPU_FIELDS:
        if other not in partners:
            assert getattr(g, other) is not None, f"{other} lost when {field} failed"
    assert set(g.unavailable) <= partners


def test_a_field_failing_on_one_gpu_leaves_the_other_gpu_whole() -> None:
    sampler = FakeSampler([FakeGpu(), FakeGpu(name="NVIDIA H100 80GB HBM3", bus_id="00000000:2A:00.0")])
    sampler.fail("power_w", error="NoPermission", gpu=1)
    status = sampler.sample().gpu
    assert status is not None
    g0, g1 = status.gpus
    assert g0.power_w == 612.0
    assert g1.power_w is None and g1.reason("power_w") == "no permission to query the NVIDIA driver"
    sampler.heal("power_w", gpu=1)
    assert only_gpu(sampler, 1).power_w == 612.0  # a transient failure clears on the next tick


def test_a_lost_gpu_is_reported_without_hiding_the_others() -> None:
    sampler = FakeSampler([FakeGpu(), FakeGpu()])
    sampler.fail_device(0, "GpuIsLost")
    status = sampler.sample().gpu
    assert status is not None and status.available
    lost, ok = status.gpus
    assert lost.name is None and "lost" in (lost.reason("util_sm") or "")
    assert ok.util_sm == 97.0


def test_no_gpu_behind_a_loaded_driver() -> None:
    status = FakeSampler([]).sample().gpu
    assert status is not None and not status.available
    assert "no GPU" in (status.reason or "")


def test_throttle_decoding_keeps_unknown_bits() -> None:
    assert decode_throttle(0) == ()
    assert decode_throttle(0x1) == ("gpu_idle",)
    assert decode_throttle(0x8 | 0x80) == ("hw_slowdown", "hw_power_brake_slowdown")
    assert decode_throttle(0x4 | 0x10000) == ("sw_power_cap", "other_0x10000")


def test_close_shuts_nvml_down_and_the_next_sample_reinitialises() -> None:
    sampler = FakeSampler()
    only_gpu(sampler)
    sampler.close()
    assert sampler.fake.shutdown_calls == 1
    assert only_gpu(sampler).util_sm == 97.0
    assert sampler.fake.init_calls == 2


def test_gpu_check_prints_every_reading_and_the_identified_peak(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    assert spec is not None and spec.loader is not None
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    sampler = FakeSampler([FakeGpu(compute_procs=[(99, GIB)])])
    sampler.fail("mem_clock")
    gpu_check.print_gpu(only_gpu(sampler))
    out = capsys.readouterr().out
    for name in GPU_FIELDS:
        assert name in out
    assert "H100 SXM" in out and "989.5 TFLOP/s" in out
    assert "N/A (not supported by this GPU or driver)" in out
    assert "pid 99: 1.00 GiB" in out
