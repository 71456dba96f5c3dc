"""The run model: events in, immutable `RunView` snapshots out, one `Run` per log, a `RunBook` per tree.

Why a layer: one place turns records into time-to-train, evals, throughput series and live
compliance findings, fed incrementally (the live view) or all at once (`report`); front ends and
measures read `RunView`s only, never a `Run`.
"""
