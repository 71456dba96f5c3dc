"""`tracked_stats` on a time cadence, counted per optimizer step.

Why per optimizer step: under gradient accumulation one optimizer step consumes
`micro_batch x accum_steps x world_size` samples. Counting micro-batches as steps, or
per-device samples as the global count, inflates or deflates throughput by exactly
that factor (the bug Composer and Lightning shipped). The caller passes the samples
the step really consumed; the meter never guesses.

Why a time cadence: a logging call is costly (mllog inspects the stack), so the
meter only reads the clock per step and logs when `interval_s` has passed.
The loss is kept as a tensor and converted to a float only when a record is written,
which avoids a device sync per step on GPUs.
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class _Sink(Protocol):
    def event(self, key: str, value: Any = None, metadata: Any = None) -> None: ...


class ThroughputMeter:
    """Counts optimizer steps and samples; logs `tracked_stats` every `interval_s` seconds."""

    def __init__(self, sink: _Sink, *, interval_s: float = 1.0, tokens_per_sample: float | None = None,
                 clock: Any = time.perf_counter) -> None:
        if interval_s < 0:
            raise ValueError("interval_s must be >= 0")
        self.sink = sink
        self.interval_s = interval_s
        self.tokens_per_sample = tokens_per_sample
        self.clock = clock
        self.steps = 0
        self.samples = 0
        self.records = 0
        self._loss: Any = None
        self._win_t = clock()
        self._win_samples = 0

    def step(self, samples: int, loss: Any = None) -> bool:
        """Record one optimizer step that consumed `samples` (global) samples; True if it logged."""
        self.steps += 1
        self.samples += samples
        self._win_samples += samples
        if loss is not None:
            self._loss = loss
        now = self.clock()
        if now - self._win_t >= self.interval_s:
            self._emit(now)
            return True
        return False

    def restart_window(self) -> None:
        """Start a new measuring window, e.g. after an eval, so eval time is not counted as training."""
        self._win_t = self.clock()
        self._win_samples = 0

    def flush(self) -> None:
        """Log the partial window now (end of an epoch), if it holds any samples."""
        if self._win_samples:
            self._emit(self.clock())

    def _emit(self, now: float) -> None:
        dt = now - self._win_t
        if dt <= 0 or self._win_samples == 0:
            return
        rate = self._win_samples / dt
        value: dict[str, float] = {"throughput": rate}
        if self.tokens_per_sample:
            value["tokens_per_s"] = rate * self.tokens_per_sample
        if self._loss is not None:
            loss = self._loss
            value["loss"] = float(loss.item() if hasattr(loss, "item") else loss)
        self.sink.event("tracked_stats", value, {"step": self.steps, "samples_count": self.samples})
        self.records += 1
        self._win_t = now
        self._win_samples = 0
