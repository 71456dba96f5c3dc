"""Welch's t on log time-to-train: the confidence interval of a speed-up, its significance, and the
runs per side that would resolve it.

Times to train are positive and their spread grows with their size, so the comparison is made on
their logarithms: the difference of mean log times is the log of the ratio of geometric means, and
Welch's t interval of that difference (unequal variances, Welch–Satterthwaite degrees of freedom)
exponentiates into an interval of the speed-up `A / B`. The difference is significant at the 5 %
level when the 95 % interval excludes 1. The runs needed per side come from the usual normal
approximation for a two-sided test at 5 % with 80 % power: `n = 2 (z₀.₉₇₅ + z₀.₈)² s² / d²`
(`s` the pooled standard deviation of the log times, `d` the observed log ratio).

The t distribution is computed here (regularized incomplete beta by continued fraction) so that
`compare` never imports scipy: the whole `perfwatch compare` of 10 vs 10 runs takes 0.43 s, and
scipy.special would add 1.19 s, scipy.stats 2.62 s (2-core host; benchmarks/library_choices.py);
scipy is not a dependency of perfwatch either (only of mlperf-logging). The tests check it against
a hand computation and scipy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95
POWER = 0.80
METHOD = "Welch t on log time-to-train"


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with `df` degrees of freedom (df may be fractional)."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(q: float, df: float) -> float:
    """The q-quantile of Student's t (bisection on `t_cdf`; 1e-12 absolute)."""
    if not 0.0 < q < 1.0:
        raise ValueError("q must be in (0, 1)")
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True, slots=True)
class Welch:
    """Speed-up A/B as a ratio of geometric means, with its 95 % interval and what it would take to resolve."""

    ratio: float
    low: float
    high: float
    df: float
    t: float
    p_value: float
    runs_needed: int | None  # per side, to resolve the observed ratio (80 % power, 5 % level); None: no difference

    @property
    def significant(self) -> bool:
        return self.low > 1.0 or self.high < 1.0

    def to_json(self) -> dict[str, object]:
        return {"method": METHOD, "level": LEVEL, "ratio_of_geometric_means": self.ratio, "low": self.low,
                "high": self.high, "df": self.df, "t": self.t, "p_value": self.p_value,
                "significant": self.significant, "runs_per_side_needed": self.runs_needed}


def welch(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Welch | None:
    """Welch's interval of mean(A)/mean(B) on the log scale; None with fewer than 2 positive values a side."""
    la = [math.log(x) for x in a if x > 0 and math.isfinite(x)]
    lb = [math.log(x) for x in b if x > 0 and math.isfinite(x)]
    if len(la) < 2 or len(lb) < 2:
        return None
    na, nb = len(la), len(lb)
    va, vb = statistics.variance(la), statistics.variance(lb)
    diff = statistics.fmean(la) - statistics.fmean(lb)
    se2 = va / na + vb / nb
    if se2 <= 0.0:
        return Welch(math.exp(diff), math.exp(diff), math.exp(diff), math.inf, math.inf,
                     0.0 if diff else 1.0, 2 if diff else None)
    se = math.sqrt(se2)
    df = se2 * se2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    tq = t_ppf(0.5 + level / 2.0, df)
    t = diff / se
    p = 2.0 * (1.0 - t_cdf(abs(t), df))
    return Welch(math.exp(diff), math.exp(diff - tq * se), math.exp(diff + tq * se), df, t, p,
                 runs_needed(va, vb, diff))


def runs_needed(var_a: float, var_b: float, log_ratio: float, alpha: float = 1 - LEVEL,
                power: float = POWER) -> int | None:
    """Runs per side for a two-sided test at `alpha` with `power` to detect `log_ratio` (normal approximation)."""
    if log_ratio == 0.0:
        return None
    z = statistics.NormalDist()
    s2 = (var_a + var_b) / 2.0
    n = 2.0 * (z.inv_cdf(1 - alpha / 2) + z.inv_cdf(power)) ** 2 * s2 / (log_ratio * log_ratio)
    return max(2, math.ceil(n))
