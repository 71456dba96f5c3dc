"""Process setup for a training run: threads, seeds, determinism, device, AMP, DDP, SIGTERM.

Each function does one thing a reference implementation must get right, so the
workloads (and user scripts) do not each re-derive it.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist


def available_cores() -> int:
    """CPU cores this process may run on (affinity, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def configure_threads(local_world_size: int = 1) -> int:
    """Intra-op threads: OMP_NUM_THREADS if set (torchrun sets it), else our share of the cores."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    n = int(env) if env.isdigit() and int(env) > 0 else max(1, available_cores() // max(1, local_world_size))
    torch.set_num_threads(n)
    return n


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy (when installed) and torch (CPU and every CUDA device)."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch.manual_seed(seed)


def set_deterministic(enabled: bool) -> None:
    """Deterministic kernels (errors on ops that have none) and no cuDNN autotuning."""
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.benchmark = not enabled
    torch.backends.cudnn.deterministic = enabled


class DeviceError(RuntimeError):
    """The asked-for device cannot be used (no CUDA, or more ranks than visible GPUs)."""


def rank_device(choice: str, local_rank: int, local_world_size: int, cuda_count: int) -> int | None:
    """The CUDA index local rank `local_rank` trains on, or None for the CPU.

    One GPU per rank, never shared and never one that does not exist: with fewer visible GPUs
    than ranks on this node, `cuda` is a DeviceError and `auto` is the CPU for every rank (all
    ranks must agree, since the process group's backend follows the device).
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    if choice == "cpu":
        return None
    if choice == "cuda" and cuda_count == 0:
        raise DeviceError(f"--device cuda was asked for but no CUDA GPU is visible{shown}")
    if local_world_size > cuda_count or local_rank >= cuda_count:
        if choice == "cuda":
            raise DeviceError(
                f"local rank {local_rank} of {local_world_size} needs a GPU of its own but {cuda_count} "
                f"{'is' if cuda_count == 1 else 'are'} visible{shown}: start at most {cuda_count} "
                "process(es) per node, or use --device cpu")
        return None
    return local_rank


def pick_device(choice: str, local_rank: int = 0, local_world_size: int = 1) -> torch.device:
    """auto -> cuda:<local_rank> when every local rank has a GPU, else cpu; see `rank_device`."""
    count = torch.cuda.device_count() if choice != "cpu" and torch.cuda.is_available() else 0
    index = rank_device(choice, local_rank, local_world_size, count)
    if index is None:
        if choice == "auto" and count and local_rank == 0:
            print(f"perfwatch: {local_world_size} processes on this node but {count} GPU(s) visible: "
                  "training on the CPU (each rank needs a GPU of its own)", file=sys.stderr, flush=True)
        return torch.device("cpu")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def gpu_uuid(device: torch.device) -> str | None:
    """The GPU's UUID as NVML writes it ("GPU-8f3c…"), which joins a rank to its GPU's telemetry on any node
    (CUDA's device index depends on CUDA_VISIBLE_DEVICES); None where torch does not say."""
    try:
        uuid = torch.cuda.get_device_properties(device).uuid
    except (AttributeError, RuntimeError, AssertionError):
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast for 'bf16', nothing for 'fp32'."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def dist_env() -> DistInfo:
    """What torchrun put in the environment (1 process when not under torchrun)."""
    def geti(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    return DistInfo(geti("RANK", 0), geti("WORLD_SIZE", 1), geti("LOCAL_RANK", 0), geti("LOCAL_WORLD_SIZE", 1))


def init_distributed(info: DistInfo, device: torch.device) -> None:
    """Join the process group (nccl on GPU, gloo on CPU) when there is more than one process."""
    if info.world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs: dict[str, Any] = {"backend": backend}
        if device.type == "cuda":
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)


def shutdown_distributed() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class StopSignal:
    """SIGTERM/SIGINT -> a flag the training loop checks between steps.

    Before `arm()` (model building, process-group setup) a signal exits at once with
    128+signum, since there is no run to stop cleanly yet.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.armed = False
        self._previous: dict[int, Any] = {}

    def install(self) -> StopSignal:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def arm(self) -> None:
        self.armed = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        if not self.armed:
            raise SystemExit(128 + signum)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or 0)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def restore(self) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous.clear()
