"""What a training script imports to be watchable by perfwatch.

    from perfwatch.instrument import MLPerfLogger, ThroughputMeter
    from perfwatch.instrument.flops import flops_per_sample  # needs torch

`MLPerfLogger` and `ThroughputMeter` need no torch; `perfwatch.instrument.flops` and the training
harness (`perfwatch.instrument.harness`) import it. perfwatch's own commands import
`perfwatch.instrument.compliance`, which is why this package imports nothing that needs torch.
"""

from __future__ import annotations

from perfwatch.instrument.mllogger import ENV_MLLOG, MLPerfLogger
from perfwatch.instrument.throughput import ThroughputMeter

__all__ = ["ENV_MLLOG", "MLPerfLogger", "ThroughputMeter"]
