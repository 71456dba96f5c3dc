"""Bounded time series: memory stays flat however long the log grows.

When the buffer is full, the older half is downsampled 2:1 (pairs averaged), so
recent points keep full resolution and old ones thin out. Exact running
statistics over *every* value ever added are kept beside it.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence

import msgspec

DEFAULT_CAPACITY = 512


class Stats(msgspec.Struct, frozen=True):
    """Exact statistics over all values added (not the downsampled ones)."""

    count: int = 0
    mean: float = math.nan
    sd: float = math.nan
    min: float = math.nan
    max: float = math.nan


class Series:
    """Points (x, y) with bounded storage; x is usually `time_ms`.

    Two parts: `recent`, the last points at full resolution (for "throughput now"), and
    `history`, every `stride`-th point since the start; when history fills up, every other
    point is dropped and the stride doubles, so it always spans the whole run evenly.
    """

    __slots__ = ("capacity", "_history", "_history_x", "_recent", "_stride", "_n", "_mean", "_m2", "_min", "_max",
                 "_cache")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 8:
            raise ValueError("capacity must be >= 8")
        self.capacity = capacity
        # points are stored as ready-made (x, y) tuples so a snapshot copies references, not numbers
        self._history: list[tuple[float, float]] = []
        self._history_x: list[float] = []  # x of the history points, for bisect
        self._recent: deque[tuple[float, float]] = deque(maxlen=capacity // 4)
        self._stride = 1
        self._n = 0
        self._mean = 0.0
        self._m2 = 0.0  # Welford: numerically stable variance
        self._min = math.inf
        self._max = -math.inf
        self._cache: tuple[tuple[float, float], ...] | None = None

    def __len__(self) -> int:
        return len(self.points())

    def append(self, x: float, y: float) -> None:
        self._cache = None
        point = (x, y)
        if self._n % self._stride == 0:
            self._keep(point)
        self._recent.append(point)
        self._n += 1
        delta = y - self._mean
        self._mean += delta / self._n
        self._m2 += delta * (y - self._mean)
        if y < self._min:
            self._min = y
        if y > self._max:
            self._max = y

    def extend(self, xs: Sequence[float], ys: list[float]) -> None:
        """Append many points at once (same result as `append` in a loop, several times faster).

        Only the x values that are kept (stride points, the recent tail) are read, so `xs` may be
        a lazy sequence.
        """
        n0 = self._n
        k = len(ys)
        if k == 0:
            return
        self._cache = None
        if k < 8:
            for x, y in zip(xs, ys, strict=True):
                self.append(x, y)
            return
        # history: the indices n0..n0+k-1 that fall on the stride (the stride may double mid-way)
        i = (-n0) % self._stride
        while i < k:
            if self._keep((xs[i], ys[i])):
                i += (-(n0 + i + 1)) % self._stride + 1
            else:
                i += self._stride
        tail = self._recent.maxlen or k
        start = max(k - tail, 0)
        self._recent.extend(zip(xs[start:k], ys[start:], strict=True))
        # merge the batch's mean/M2 into the running ones (Chan et al.)
        bmean = math.fsum(ys) / k
        bm2 = math.fsum([(y - bmean) * (y - bmean) for y in ys])
        n = n0 + k
        delta = bmean - self._mean
        self._mean += delta * k / n
        self._m2 += bm2 + delta * delta * n0 * k / n
        self._n = n
        lo, hi = min(ys), max(ys)
        if lo < self._min:
            self._min = lo
        if hi > self._max:
            self._max = hi

    def _keep(self, point: tuple[float, float]) -> bool:
        """Add a history point; True when that filled the history and it was thinned 2:1."""
        self._history.append(point)
        self._history_x.append(point[0])
        if len(self._history) >= self.capacity - self.capacity // 4:
            del self._history[1::2]
            del self._history_x[1::2]
            self._stride *= 2
            return True
        return False

    @property
    def last(self) -> tuple[float, float] | None:
        return self._recent[-1] if self._recent else None

    def recent(self) -> tuple[tuple[float, float], ...]:
        """The last points at full resolution, oldest first."""
        return tuple(self._recent)

    def points(self) -> tuple[tuple[float, float], ...]:
        """The whole run: thinned history before the recent window, then the recent points."""
        if self._cache is not None:
            return self._cache
        if not self._recent:
            return ()
        k = bisect.bisect_left(self._history_x, self._recent[0][0])
        self._cache = tuple(self._history[:k]) + tuple(self._recent)
        return self._cache

    def stats(self) -> Stats:
        n = self._n
        if n == 0:
            return Stats()
        var = self._m2 / (n - 1) if n > 1 else 0.0
        return Stats(n, self._mean, math.sqrt(var), self._min, self._max)
