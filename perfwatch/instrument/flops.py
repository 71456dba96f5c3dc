"""FLOPs per training sample, counted by PyTorch on one real forward+backward.

`torch.utils.flop_counter.FlopCounterMode` counts the matmul/conv/attention FLOPs the
dispatcher really runs (fwd and bwd), so MFU needs no hand-written formula per model.
The count runs on a deep copy of the model: a forward in train mode updates BatchNorm
statistics, and the real run must not see that extra step.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_step_flops(model: nn.Module, loss_fn: Callable[[nn.Module, tuple[torch.Tensor, ...]], torch.Tensor],
                     batch: tuple[torch.Tensor, ...]) -> int:
    """Total FLOPs of `loss_fn(copy_of_model, batch).backward()`."""
    probe = copy.deepcopy(model)
    probe.train()
    with FlopCounterMode(display=False) as counter:
        loss = loss_fn(probe, batch)
        loss.backward()
    return int(counter.get_total_flops())


def flops_per_sample(model: nn.Module, loss_fn: Callable[[nn.Module, tuple[torch.Tensor, ...]], torch.Tensor],
                     batch: tuple[torch.Tensor, ...]) -> float:
    """Training FLOPs (fwd+bwd) per sample, measured on `batch` (its first dim is the batch size)."""
    n = int(batch[0].shape[0])
    if n <= 0:
        raise ValueError("batch is empty")
    return count_step_flops(model, loss_fn, batch) / n
