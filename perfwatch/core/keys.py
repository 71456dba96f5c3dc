"""perfwatch's own mllog keys: the contract between the workloads' logger and perfwatch's readers.

Like mlperf_logging's `mllog/constants.py` for MLPerf's keys: `perfwatch.instrument` writes these
(each as one POINT_IN_TIME record, value in `value`), the run model and the measures read them.
The official checker ignores keys it does not know, so a log carrying them stays compliant.
Every key starts with `perfwatch_`; no other module spells one out.
"""

from __future__ import annotations

__all__ = [
    "DEVICE", "DEVICES", "DEVICE_COUNT", "FLOPS_PER_SAMPLE", "OWN_KEYS", "PRECISION", "TARGET", "THREADS",
    "TOKENS_PER_SAMPLE", "WORLD_SIZE",
]

# Model FLOPs of one training sample (forward + backward, 3x forward): the numerator of MFU.
FLOPS_PER_SAMPLE = "perfwatch_flops_per_sample"
# Tokens in one sample (sequence models): tokens/s = samples/s x this.
TOKENS_PER_SAMPLE = "perfwatch_tokens_per_sample"
# The arithmetic the run trains in: "fp32", "bf16", ... (selects the datasheet peak column).
PRECISION = "perfwatch_precision"
# Processes training together (torchrun's WORLD_SIZE; 1 alone): one device each.
WORLD_SIZE = "perfwatch_world_size"
# The device rank 0 trains on, as torch names it: "NVIDIA H100 80GB HBM3", or "cpu".
DEVICE = "perfwatch_device"
# Every rank's device, in rank order: ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"] or ["cpu", "cpu"].
DEVICES = "perfwatch_devices"
# GPUs the run trains on: distinct GPUs over all ranks and nodes (one per rank); 0 on the CPU.
DEVICE_COUNT = "perfwatch_device_count"
# CPU runs only: torch's thread count, the measured CPU peak is per thread count.
THREADS = "perfwatch_threads"
# The workload's own quality target for eval_accuracy: value = threshold,
# metadata = {"higher_is_better": bool}.
TARGET = "perfwatch_target"

OWN_KEYS = frozenset({FLOPS_PER_SAMPLE, TOKENS_PER_SAMPLE, PRECISION, WORLD_SIZE, DEVICE, DEVICES, DEVICE_COUNT,
                      THREADS, TARGET})
