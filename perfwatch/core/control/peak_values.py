"""The values a campaign's `peak_flops` takes: FLOP/s written as people write them, per dtype.

Its own small module (standard library only) because two layers read it: the campaign validator
(control/job_settings.py) and the datasheet table (measure/peaks.py), which must not pull the YAML
machinery into `perfwatch report`.
"""

from __future__ import annotations

import math
import re

__all__ = ["ANY", "PEAK_DTYPES", "parse_flops"]

# dtypes a peak is given for (the columns of measure/peaks.py's datasheet table)
PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
ANY = "*"  # every device / every dtype
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_flops(value: float | int | str) -> float:
    """312e12, "312e12", "312T", "312 TFLOPS", "1.98 PFLOP/s" -> FLOP/s."""
    if isinstance(value, bool):
        raise ValueError("peak_flops must be a number")
    if isinstance(value, int | float):
        f = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[-+]?\d+)?)\s*([kmgtp]?)\s*(?:flop(?:s|/s)?)?\s*", value.lower())
        if m is None:
            raise ValueError(f"cannot read {value!r} as FLOP/s (try 312e12 or '312 TFLOPS')")
        f = float(m.group(1)) * _SUFFIX[m.group(2)]
    if not math.isfinite(f) or f <= 0:
        raise ValueError(f"peak_flops must be a positive number, got {value!r}")
    return f
