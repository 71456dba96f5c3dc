"""Measures derived from a run: throughput statistics, MFU against THE one peak resolver, peaks tables.

Why a layer: the TUI, headless and `report` must show the same MFU from the same peak, and say
which peak it was (`mfu.resolve_peak`); `peaks` identifies GPUs and holds the datasheet table and
the host's measured CPU peak, `throughput` the rates and their statistics.
"""
