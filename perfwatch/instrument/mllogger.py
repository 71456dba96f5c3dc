"""MLPerf-compliant event logging for a training script, rank 0 only.

Wraps a private `mlperf_logging.mllog.MLLogger` (so the lines are exactly what the
official tools parse) with its own `logging.Logger`: the global mllog logger also
prints to stdout, which would give perfwatch every record twice (mllog.txt and
output.log). The destination is `--mllog PATH`, else `$PERFWATCH_MLLOG`, else stdout.

`mllog`'s `event()` inspects the call stack on every call, so training loops must
log on a cadence (see `throughput.ThroughputMeter`), never once per step.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from mlperf_logging.mllog import constants as C
from mlperf_logging.mllog import mllog

from perfwatch.core import keys

ENV_MLLOG = "PERFWATCH_MLLOG"
_ids = itertools.count()


def env_rank() -> int:
    """The process's global rank: torch.distributed if initialized, else torchrun's RANK, else 0."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except ImportError:  # torch is optional for the logger itself
        pass
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


class MLPerfLogger:
    """Writes the MLPerf event sequence; a silent no-op on every rank but 0."""

    def __init__(self, path: str | None = None, *, rank: int | None = None, echo: bool = False,
                 mode: str = "w") -> None:
        path = path or os.environ.get(ENV_MLLOG) or None
        self.path = path
        self.rank = env_rank() if rank is None else rank
        self.enabled = self.rank == 0
        self._stopped = False
        self._handlers: list[logging.Handler] = []
        self._ml: mllog.MLLogger | None = None
        if not self.enabled:
            return
        lg = logging.getLogger(f"perfwatch.mllog.{os.getpid()}.{next(_ids)}")
        lg.propagate = False
        lg.setLevel(logging.INFO)
        if path:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            self._handlers.append(logging.FileHandler(path, mode=mode, encoding="utf-8"))
        if not path or echo:
            self._handlers.append(logging.StreamHandler(sys.stdout))
        for h in self._handlers:
            h.setLevel(logging.INFO)
            lg.addHandler(h)
        self._logger = lg
        # stack offset 2: report the caller of our helper methods, not this file
        self._ml = mllog.MLLogger(logger=lg, default_stack_offset=2)

    # ---- raw records ----------------------------------------------------------
    def event(self, key: str, value: Any = None, metadata: Mapping[str, Any] | None = None) -> None:
        if self._ml is not None:
            self._ml.event(key=key, value=value, metadata=dict(metadata) if metadata else None)

    def start(self, key: str, value: Any = None, metadata: Mapping[str, Any] | None = None) -> None:
        if self._ml is not None:
            self._ml.start(key=key, value=value, metadata=dict(metadata) if metadata else None)

    def end(self, key: str, value: Any = None, metadata: Mapping[str, Any] | None = None) -> None:
        if self._ml is not None:
            self._ml.end(key=key, value=value, metadata=dict(metadata) if metadata else None)

    # ---- the compliant sequence -----------------------------------------------
    def init_start(self) -> None:
        """cache_clear then init_start: the first records of every MLPerf run."""
        self.event(C.CACHE_CLEAR, True)
        self.start(C.INIT_START)

    def submission(self, benchmark: str, *, org: str = "perfwatch", division: str = "open",
                   platform: str = "unknown", status: str = "onprem") -> None:
        self.event(C.SUBMISSION_BENCHMARK, benchmark)
        self.event(C.SUBMISSION_ORG, org)
        self.event(C.SUBMISSION_DIVISION, division)
        self.event(C.SUBMISSION_STATUS, status)
        self.event(C.SUBMISSION_PLATFORM, platform)

    def params(self, values: Mapping[str, Any]) -> None:
        """One POINT_IN_TIME record per hyperparameter (seed, global_batch_size, opt_*...)."""
        for key, value in values.items():
            self.event(key, value)

    def target(self, value: float, *, higher_is_better: bool = True) -> None:
        """The workload's own quality target for `eval_accuracy` (perfwatch reads it)."""
        self.event(keys.TARGET, float(value), {"higher_is_better": bool(higher_is_better)})

    def init_stop(self) -> None:
        self.end(C.INIT_STOP)

    def run_start(self) -> None:
        self.start(C.RUN_START)

    def block_start(self, first_epoch_num: int, samples_count: int, epoch_count: int = 1) -> None:
        self.start(C.BLOCK_START, metadata={C.FIRST_EPOCH_NUM: first_epoch_num,
                                            C.EPOCH_COUNT: epoch_count, C.SAMPLES_COUNT: samples_count})

    def block_stop(self, first_epoch_num: int, samples_count: int) -> None:
        self.end(C.BLOCK_STOP, metadata={C.FIRST_EPOCH_NUM: first_epoch_num, C.SAMPLES_COUNT: samples_count})

    def eval_start(self, epoch_num: int, samples_count: int) -> None:
        self.start(C.EVAL_START, metadata={C.EPOCH_NUM: epoch_num, C.SAMPLES_COUNT: samples_count})

    def eval_stop(self, epoch_num: int, samples_count: int) -> None:
        self.end(C.EVAL_STOP, metadata={C.EPOCH_NUM: epoch_num, C.SAMPLES_COUNT: samples_count})

    def eval_accuracy(self, value: float, epoch_num: int, samples_count: int) -> None:
        self.event(C.EVAL_ACCURACY, float(value),
                   metadata={C.EPOCH_NUM: epoch_num, C.SAMPLES_COUNT: samples_count})

    def run_stop(self, status: str, *, epoch_num: int | None = None, samples_count: int | None = None,
                 reason: str | None = None) -> bool:
        """Log run_stop once (later calls are ignored); status is "success" or "aborted"."""
        if self._stopped:
            return False
        self._stopped = True
        md: dict[str, Any] = {C.STATUS: status}
        if epoch_num is not None:
            md[C.EPOCH_NUM] = epoch_num
        if samples_count is not None:
            md[C.SAMPLES_COUNT] = samples_count
        if reason:
            md["reason"] = reason
        self.end(C.RUN_STOP, metadata=md)
        return True

    @property
    def stopped(self) -> bool:
        return self._stopped

    def close(self) -> None:
        for h in self._handlers:
            h.flush()
            if isinstance(h, logging.FileHandler):
                h.close()
            self._logger.removeHandler(h)
        self._handlers.clear()
        self._ml = None
