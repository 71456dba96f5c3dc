"""Results: what `report`, `compare` and `package` produce from a tree of runs.

Why a layer: the summary table and its formats (`summary`), baseline-vs-variant comparisons and
the Mila suite JSON (`comparison`), and an MLPerf submission folder (`submission`) are built from
`RunView`s and measures, never from raw files.
"""
