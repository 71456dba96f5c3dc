"""Workloads and GPUs: rank -> device mapping, clear errors, the `--preset gpu` sizes, device logging.

The mapping and the errors are tested on any machine; the tests marked `needs_cuda` train on a
real CUDA GPU and skip cleanly where there is none (CI). Nothing here fakes CUDA.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_workloads import TINY, WORKLOADS, load, view_of

from perfwatch.core import keys
from perfwatch.instrument import hparams
from perfwatch.instrument.runtime import DeviceError, rank_device

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
# the suite empties CUDA_VISIBLE_DEVICES for every test not marked `gpu` (tests/conftest.py)
CPU_TINY = [a for a in TINY["mlp"] if a not in ("--device", "cpu")]


@pytest.mark.parametrize(("choice", "rank", "ranks", "gpus", "expected"), [
    ("auto", 0, 1, 0, None),  # no GPU: the CPU
    ("auto", 0, 1, 1, 0),
    ("auto", 1, 2, 2, 1),  # one GPU per local rank
    ("auto", 0, 2, 1, None),  # 2 ranks, 1 GPU: every rank on the CPU (they must agree on the backend)
    ("auto", 1, 2, 1, None),
    ("cpu", 0, 1, 8, None),
    ("cuda", 3, 4, 8, 3),
])
def test_each_local_rank_gets_its_own_gpu_or_all_use_the_cpu(
        choice: str, rank: int, ranks: int, gpus: int, expected: int | None) -> None:
    assert rank_device(choice, rank, ranks, gpus) == expected


def test_cuda_never_addresses_a_gpu_that_does_not_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(DeviceError, match=r"local rank 1 of 2 needs a GPU of its own but 1 is visible "
                                          r"\(CUDA_VISIBLE_DEVICES='0'\): start at most 1 process\(es\) per node"):
        rank_device("cuda", 1, 2, 1)
    with pytest.raises(DeviceError, match="local rank 0 of 2"):  # rank 0 refuses too: no half-started job
        rank_device("cuda", 0, 2, 1)
    with pytest.raises(DeviceError, match="no CUDA GPU is visible"):
        rank_device("cuda", 0, 1, 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_device_cuda_without_a_gpu_is_a_clear_usage_error(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    proc = subprocess.run([sys.executable, str(WORKLOADS / "mlp.py"), *CPU_TINY, "--device", "cuda",
                           "--mllog", str(log)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--device cuda was asked for but no CUDA GPU is visible" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert view_of(log).run_status == "aborted"  # perfwatch still sees the run end


@pytest.mark.parametrize("name", ["mlp", "cnn", "mlm"])
def test_gpu_preset_sets_real_flags_and_explicit_flags_win(name: str) -> None:
    mod = load(name)
    preset = mod.PRESETS["gpu"]
    args = hparams.parse_with_config(mod.parser(), ["--preset", "gpu"])
    for dest, value in preset.items():
        assert getattr(args, dest) == value, dest
    assert args.precision == "bf16" and args.warmup_steps > 0
    assert args.train_samples // args.batch_size >= args.warmup_steps // 2, "warm-up within the first epochs"
    again = hparams.parse_with_config(mod.parser(), ["--preset", "gpu", "--batch-size", "64", "--precision", "fp32"])
    assert (again.batch_size, again.precision) == (64, "fp32")
    default = hparams.parse_with_config(mod.parser(), [])
    assert default.batch_size != preset["batch_size"], "the preset is not the default"


# ---- on a real GPU only ----------------------------------------------------------------------------
@pytest.mark.gpu
@needs_cuda
def test_one_process_trains_on_the_gpu_and_logs_it(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    proc = subprocess.run([sys.executable, str(WORKLOADS / "mlp.py"), *CPU_TINY, "--precision", "bf16",
                           "--max-epochs", "1", "--target", "-10", "--mllog", str(log)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = view_of(log)
    name = torch.cuda.get_device_name(0)
    assert v.params[keys.DEVICE] == name and v.params[keys.DEVICES] == [name]
    assert v.params[keys.DEVICE_COUNT] == 1 and v.precision == "bf16"


@pytest.mark.gpu
@needs_cuda
def test_two_ranks_on_one_visible_gpu(tmp_path: Path) -> None:
    """A one-GPU machine: torchrun with 2 processes and 1 GPU. auto -> CPU (said), cuda -> clear error."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    base = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            str(WORKLOADS / "mlp.py"), *CPU_TINY, "--max-epochs", "1", "--target", "-10"]
    auto = subprocess.run([*base, "--mllog", str(tmp_path / "a.txt")], capture_output=True, text=True,
                          timeout=300, env=env)
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert "2 processes on this node but 1 GPU(s) visible: training on the CPU" in auto.stderr
    assert view_of(tmp_path / "a.txt").params[keys.DEVICES] == ["cpu", "cpu"]
    cuda = subprocess.run([*base, "--device", "cuda", "--mllog", str(tmp_path / "c.txt")], capture_output=True,
                          text=True, timeout=300, env=env)
    assert cuda.returncode != 0 and "needs a GPU of its own but 1 is visible" in cuda.stderr


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_torchrun_puts_each_rank_on_its_own_gpu_with_nccl(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(WORKLOADS / "mlp.py"), *CPU_TINY, "--max-epochs", "1", "--target", "-10",
                           "--mllog", str(log)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = view_of(log)
    assert v.params[keys.DEVICE_COUNT] == 2 and len(v.params[keys.DEVICES]) == 2
