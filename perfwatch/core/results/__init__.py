"""Results: what `report`, `compare` and `package` produce from a tree of runs.

Why a layer: the summary table and its formats (`summary`), baseline-vs-variant comparisons and
the Mila suite JSON (`comparison`), and an MLPerf submission folder (`submission`) are built from
`RunView`s and measures, never from raw files.
"""

from perfwatch.core import lazy_exports

_EXPORTS = {
    "build": "summary",
    "compare": "comparison",
    "baseline_grid": "comparison",
    "package": "submission",
    "PackageError": "submission",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
