"""Measures derived from a run: throughput statistics, MFU against THE one peak resolver, peaks tables.

Why a layer: the TUI, headless and `report` must show the same MFU from the same peak, and say
which peak it was (`mfu.resolve_peak`); `peaks` identifies GPUs and holds the datasheet table and
the host's measured CPU peak, `throughput` the rates and their statistics.
"""

from perfwatch.core import lazy_exports

_EXPORTS = {
    "PeakFlops": "peaks",
    "peak_for": "peaks",
    "identify_gpu": "peaks",
    "rolling_throughput": "throughput",
    "throughput_summary": "columns",
    "train_item_stats": "throughput",
    "run_mfu": "mfu",
    "resolve_peak": "mfu",
    "PeakChoice": "mfu",
    "Overrides": "mfu",
    "report_extra": "columns",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
