"""Telemetry: what the machine did while a run trained (GPUs through NVML, host CPU and memory).

Why a layer: samplers (`NvmlSampler`, `HostSampler`, `FakeSampler` for machines without a GPU) share
one interface, the `TelemetryThread` samples off the UI thread and appends each run's share to
its `telemetry.jsonl`, which `read_telemetry`/`summarize_telemetry` read back for reports.
"""
