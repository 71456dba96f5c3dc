"""The run model: events in, immutable `RunView` snapshots out, one `Run` per log, a `RunBook` per tree.

Why a layer: one place turns records into time-to-train, evals, throughput series and live
compliance findings, fed incrementally (the live view) or all at once (`report`); front ends and
measures read `RunView`s only, never a `Run`.
"""

from perfwatch.core import lazy_exports

_EXPORTS = {
    "Run": "run",
    "RunView": "view",
    "EvalPoint": "view",
    "RunBook": "book",
    "load": "book",
    "Series": "series",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
