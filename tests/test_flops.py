"""Peak FLOP/s table and GPU identification from what NVML reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfwatch.core.measure.host_peak import cpu_peak, measure_matmul
from perfwatch.core.measure.peaks import (
    DTYPES,
    GPU_MODELS,
    gpu_peak,
    identify_gpu,
    normalize_dtype,
    parse_flops,
    peak_for,
    peak_for_sample,
)
from perfwatch.core.telemetry.fake import FakeGpu, FakeSampler

MIB = 1024**2

# (name exactly as nvidia-smi / nvmlDeviceGetName report it, memory MiB as reported, default power W, model)
REAL_BOARDS = [
    ("Tesla V100-SXM2-16GB", 16160, 300, "v100-sxm2"),
    ("Tesla V100-SXM2-32GB", 32510, 300, "v100-sxm2"),
    ("Tesla V100-PCIE-16GB", 16160, 250, "v100-pcie"),
    ("Tesla V100-PCIE-32GB", 32510, 250, "v100-pcie"),
    ("Tesla V100S-PCIE-32GB", 32510, 250, "v100s-pcie"),
    ("Tesla T4", 15360, 70, "t4"),
    ("NVIDIA A10", 23028, 150, "a10"),
    ("NVIDIA A10G", 23028, 300, "a10g"),
    ("NVIDIA A100-SXM4-40GB", 40960, 400, "a100-sxm-40"),
    ("A100-SXM4-40GB", 40536, 400, "a100-sxm-40"),  # drivers before R470 had no "NVIDIA " prefix
    ("NVIDIA A100-SXM4-80GB", 81920, 400, "a100-sxm-80"),
    ("NVIDIA A100-PCIE-40GB", 40960, 250, "a100-pcie-40"),
    ("NVIDIA A100 80GB PCIe", 81920, 300, "a100-pcie-80"),
    ("NVIDIA L4", 23034, 72, "l4"),
    ("NVIDIA L40S", 46068, 350, "l40s"),
    ("NVIDIA H100 80GB HBM3", 81559, 700, "h100-sxm"),
    ("NVIDIA H100 PCIe", 81559, 350, "h100-pcie"),
    ("NVIDIA H100 NVL", 95830, 400, "h100-nvl"),
    ("NVIDIA H200", 143771, 700, "h200-sxm"),
    ("NVIDIA H200 NVL", 143771, 600, "h200-nvl"),
    ("NVIDIA B200", 183359, 1000, "b200"),
]


@pytest.mark.parametrize(("name", "mib", "watts", "key"), REAL_BOARDS)
def test_identifies_real_nvml_names(name: str, mib: int, watts: int, key: str) -> None:
    ident = identify_gpu(name, mib * MIB, watts)
    assert ident.model is not None, ident.evidence
    assert ident.model.key == key


def test_h100_form_factor_from_power_when_the_name_does_not_say() -> None:
    sxm, why_sxm = peak_for("NVIDIA H100", "bf16", mem_total=81559 * MIB, power_limit_w=700)
    pcie, why_pcie = peak_for("NVIDIA H100", "bf16", mem_total=81559 * MIB, power_limit_w=350)
    assert sxm is not None and pcie is not None
    assert (sxm.device, pcie.device) == ("H100 SXM", "H100 PCIe")
    assert sxm.flops == pytest.approx(989.5e12)  # datasheet 1979 "with sparsity", halved
    assert pcie.flops == pytest.approx(756.5e12)
    assert "power" in why_sxm and "power" in why_pcie


def test_h100_with_neither_form_nor_power_is_not_guessed() -> None:
    peak, why = peak_for("NVIDIA H100", "bf16")
    assert peak is None and "power limit" in why


def test_a100_size_and_form_from_memory_and_power() -> None:
    assert identify_gpu("NVIDIA A100", 81920 * MIB, 400).model.key == "a100-sxm-80"  # type: ignore[union-attr]
    assert identify_gpu("NVIDIA A100", 40960 * MIB, 250).model.key == "a100-pcie-40"  # type: ignore[union-attr]


def test_an_admin_power_cap_does_not_turn_an_sxm_into_a_pcie() -> None:
    # enforced limit capped at 350 W, but the board's default limit (its TDP) is still 700 W
    sampler = FakeSampler([FakeGpu(name="NVIDIA H100 80GB HBM3", power_limit_mw=350_000)])
    gpu = sampler.sample().gpu.gpus[0]  # type: ignore[union-attr]
    assert gpu.power_limit_w == 350.0
    peak, _ = peak_for_sample(gpu, "bf16")
    assert peak is not None and peak.device == "H100 SXM"


@pytest.mark.parametrize("name", ["NVIDIA GH200 480GB", "NVIDIA GeForce RTX 4090", "AMD Instinct MI300X", ""])
def test_unknown_boards_give_no_peak_and_point_to_the_override(name: str) -> None:
    peak, why = peak_for(name, "bf16", mem_total=24 * 1024 * MIB, power_limit_w=450)
    assert peak is None
    assert why


def test_names_that_contain_other_names_are_not_confused() -> None:
    assert identify_gpu("NVIDIA A100-SXM4-40GB", 40960 * MIB, 400).model.key.startswith("a100")  # type: ignore[union-attr]
    assert identify_gpu("NVIDIA L40S", 46068 * MIB, 350).model.key == "l40s"  # type: ignore[union-attr]
    assert identify_gpu("NVIDIA A10G", 23028 * MIB, 300).model.key == "a10g"  # type: ignore[union-attr]


def test_every_entry_has_a_source_and_dense_values() -> None:
    for model in GPU_MODELS.values():
        assert model.source
        assert set(model.peaks) == set(DTYPES)
        assert model.peaks["fp32"]
    # no bf16 / fp8 path on Volta and Turing: no peak rather than a wrong one
    v100 = GPU_MODELS["v100-sxm2"]
    assert gpu_peak(v100, "bf16") is None
    assert gpu_peak(v100, "fp16").flops == pytest.approx(125e12)  # type: ignore[union-attr]
    peak, why = peak_for("Tesla V100-SXM2-16GB", "bf16", mem_total=16160 * MIB, power_limit_w=300)
    assert peak is None and "bf16" in why
    # 16/8-bit tensor paths beat non-tensor FP32 everywhere they exist
    for model in GPU_MODELS.values():
        fp32 = model.peaks["fp32"]
        assert fp32 is not None
        for dt in ("bf16", "fp16", "fp8"):
            value = model.peaks[dt]
            assert value is None or value > fp32
        assert model.peaks["tf32"] is None or model.peaks["tf32"] >= fp32  # A10G: TF32 rate = FP32 rate


@pytest.mark.parametrize(
    ("label", "dtype"),
    [("amp_bf16", "bf16"), ("bf16-mixed", "bf16"), ("torch.float16", "fp16"), ("FP32", "fp32"),
     ("tf32", "tf32"), ("fp8", "fp8"), (None, "fp32"), ("int4-weird", "fp32")],
)
def test_precision_labels(label: str | None, dtype: str) -> None:
    assert normalize_dtype(label) == dtype


def test_campaign_peak_override() -> None:
    assert parse_flops("312T") == pytest.approx(312e12)
    assert parse_flops("1.98 PFLOPS") == pytest.approx(1.98e15)
    assert parse_flops(312e12) == pytest.approx(312e12)
    with pytest.raises(ValueError):
        parse_flops("fast")
    with pytest.raises(ValueError):
        parse_flops(-1)
    # the campaign's table as job_settings stores it: device pattern -> dtype -> FLOP/s ("*" = any)
    from perfwatch.core.ingest.mllog import Event
    from perfwatch.core.measure.mfu import resolve_peak
    from perfwatch.core.model.run import Run

    run = Run("r0")
    run.apply([Event(0.0, "perfwatch_device", "NVIDIA H100 PCIe"), Event(0.0, "perfwatch_precision", "fp32")])
    view = run.view()
    one = resolve_peak(view, peak_flops={"*": {"*": parse_flops("400 TFLOP/s")}})
    assert one.peak is not None and one.peak.flops == pytest.approx(4e14) and one.peak.device == "campaign"
    per_dtype = resolve_peak(view, peak_flops={"*": {"bf16": 5e14, "fp32": parse_flops("60T")}})
    assert per_dtype.peak is not None and per_dtype.peak.flops == pytest.approx(6e13)
    by_device = resolve_peak(view, peak_flops={"A100": {"*": 1e12}, "h100 pcie": {"fp32": 5e13}})
    assert by_device.peak is not None and by_device.peak.flops == pytest.approx(5e13)  # its own name, any case
    fp8_only = resolve_peak(view, peak_flops={"*": {"fp8": 1e15}})  # no fp32 entry: the datasheet's (51 TFLOP/s)
    assert fp8_only.peak is not None and fp8_only.peak.flops == pytest.approx(51e12)


def test_cpu_peak_is_measured_once_then_cached(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []

    def fake_measure(dtype: str, threads: int) -> float:
        calls.append((dtype, threads))
        return 1.5e11 + len(calls)

    first = cpu_peak("fp32", threads=2, cache=tmp_path, measure_with=fake_measure)
    again = cpu_peak("fp32", threads=2, cache=tmp_path, measure_with=fake_measure)
    assert calls == [("fp32", 2)]
    assert again.flops == first.flops and again.measured and "cpu:" in again.device
    assert "measured" in again.source
    cached = json.loads((tmp_path / "cpu_peak.json").read_text())
    assert any("threads=2" in key and key.endswith("|fp32") for key in cached)
    cpu_peak("fp32", threads=1, cache=tmp_path, measure_with=fake_measure)  # another thread count: measured
    cpu_peak("fp32", threads=2, cache=tmp_path, measure_with=fake_measure, refresh=True)
    assert len(calls) == 3


def test_real_cpu_matmul_measurement_is_positive() -> None:
    assert measure_matmul("fp32", size=64, repeats=1, threads=1) > 0


def test_cached_cpu_peak_never_measures(tmp_path) -> None:
    """The live view only reads a peak measured earlier: it must not steal the runs' cores."""
    from perfwatch.core.measure.host_peak import cached_cpu_peak

    assert cached_cpu_peak("fp32", threads=3, cache=tmp_path) is None
    measured = cpu_peak("fp32", threads=3, cache=tmp_path, measure_with=lambda dt, th: 1.5e11)
    again = cached_cpu_peak("fp32", threads=3, cache=tmp_path)
    assert again is not None and again.flops == measured.flops == 1.5e11 and again.measured
    assert cached_cpu_peak("fp32", threads=1, cache=tmp_path) is None  # other thread count: not measured
