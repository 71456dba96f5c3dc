"""Bounded time series: memory stays flat however long the log grows.

When the buffer is full, the older half is downsampled 2:1 (pairs averaged), so
recent points keep full resolution and old ones thin out. Exact running
statistics over *every* value ever added are kept beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_CAPACITY = 512


@dataclass(frozen=True, slots=True)
class Stats:
    """Exact statistics over all values added (not the downsampled ones)."""

    count: int = 0
    mean: float = math.nan
    sd: float = math.nan
    min: float = math.nan
    max: float = math.nan


class Series:
    """Points (x, y) with bounded storage; x is usually `time_ms`."""

    __slots__ = ("_xs", "_ys", "capacity", "_n", "_sum", "_sumsq", "_min", "_max")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 4:
            raise ValueError("capacity must be >= 4")
        self.capacity = capacity
        self._xs: list[float] = []
        self._ys: list[float] = []
        self._n = 0
        self._sum = 0.0
        self._sumsq = 0.0
        self._min = math.inf
        self._max = -math.inf

    def __len__(self) -> int:
        return len(self._xs)

    def append(self, x: float, y: float) -> None:
        self._xs.append(x)
        self._ys.append(y)
        self._n += 1
        self._sum += y
        self._sumsq += y * y
        if y < self._min:
            self._min = y
        if y > self._max:
            self._max = y
        if len(self._xs) >= self.capacity:
            self._compact()

    def _compact(self) -> None:
        half = (len(self._xs) // 2) & ~1
        xs, ys = self._xs, self._ys
        new_x = [(xs[i] + xs[i + 1]) / 2 for i in range(0, half, 2)]
        new_y = [(ys[i] + ys[i + 1]) / 2 for i in range(0, half, 2)]
        self._xs = new_x + xs[half:]
        self._ys = new_y + ys[half:]

    @property
    def last(self) -> tuple[float, float] | None:
        if not self._xs:
            return None
        return self._xs[-1], self._ys[-1]

    def points(self) -> tuple[tuple[float, float], ...]:
        return tuple(zip(self._xs, self._ys, strict=True))

    def stats(self) -> Stats:
        n = self._n
        if n == 0:
            return Stats()
        mean = self._sum / n
        var = max(self._sumsq / n - mean * mean, 0.0) * (n / (n - 1)) if n > 1 else 0.0
        return Stats(n, mean, math.sqrt(var), self._min, self._max)
