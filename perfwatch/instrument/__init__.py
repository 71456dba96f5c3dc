"""What a training script imports to be watchable by perfwatch.

    from perfwatch.instrument import MLPerfLogger, ThroughputMeter, flops_per_sample

`MLPerfLogger` and `ThroughputMeter` need no torch; `flops_per_sample` and the training
harness (`perfwatch.instrument.harness`) import torch when first used.
"""

from __future__ import annotations

from typing import Any

from perfwatch.instrument.mllogger import ENV_MLLOG, MLPerfLogger
from perfwatch.instrument.throughput import ThroughputMeter

__all__ = ["ENV_MLLOG", "MLPerfLogger", "ThroughputMeter", "flops_per_sample", "count_step_flops"]


def __getattr__(name: str) -> Any:
    if name in ("flops_per_sample", "count_step_flops"):
        from perfwatch.instrument import flops

        return getattr(flops, name)
    raise AttributeError(name)
