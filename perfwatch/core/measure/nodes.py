"""A run sampled on several compute nodes (Slurm), now: each node's figures and the run's total.

What the live view shows for such a run, one line per node and one for the run. A node's figures
come from its newest telemetry record (telemetry/jsonl.py; each field within the bounds `report`
reads it with, `field`): GPU utilisation averaged over the node's GPUs, GPU power and memory used
added over them, the job's processes' CPU and RSS on the node. Its GPU energy is the node's share
computed as `report` computes the run's (measure/energy.py `EnergyFollower.node_energy`). The total
adds GPUs, power, memory, CPU and RSS over the nodes and averages utilisation over every GPU of the
run, as `report`'s row does (`jsonl._total`); its energy is the run's own (`EnergyFollower.energy`,
`report`'s number), not a sum of rounded parts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from perfwatch.core.ingest.sanitize import finite
from perfwatch.core.measure.energy import RunEnergy
from perfwatch.core.telemetry.jsonl import field

__all__ = ["NodeFigures", "NodeTelemetry", "node_telemetry"]


class NodeFigures(msgspec.Struct, frozen=True):
    """One node's figures at its newest sample, or the run's total over its nodes. None: not measured."""

    node: str  # the node's name; "" for telemetry.jsonl (sampled where perfwatch runs) and for the total
    time: float | None  # the newest sample's time (the total: the newest of any node)
    gpus: int  # GPUs in that sample
    gpu_util: float | None  # percent, mean over the GPUs that report it
    power_w: float | None  # added over the GPUs
    mem_used: int | None  # bytes of GPU memory in use, added over the GPUs
    cpu_percent: float | None  # the job's processes on the node (100 = one core)
    rss: int | None  # bytes, the same processes
    energy: RunEnergy | None  # GPU energy (to train, whole run); None: none recorded
    gpu_unavailable: str | None = None  # why the node has no GPU figures (no NVML, no GPU)


class NodeTelemetry(msgspec.Struct, frozen=True):
    nodes: tuple[NodeFigures, ...]  # by node name
    total: NodeFigures


def _gpu_figures(gpus: Sequence[Mapping[str, Any]]) -> tuple[float | None, float | None, int | None]:
    """(mean utilisation, power added, memory added) over these GPU entries of telemetry records."""
    utils = [u for g in gpus if (u := field(g, "util_sm")) is not None]
    powers = [p for g in gpus if (p := field(g, "power_w")) is not None]
    mems = [int(m) for g in gpus if isinstance(g.get("mem_used"), int) and (m := field(g, "mem_used")) is not None]
    return (math.fsum(utils) / len(utils) if utils else None, math.fsum(powers) if powers else None,
            sum(mems) if mems else None)


def _gpus(rec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [g for g in rec.get("gpus") or () if isinstance(g, dict)]


def _added(values: Sequence[float | int | None]) -> Any:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _node(node: str, rec: Mapping[str, Any], energy: RunEnergy | None) -> NodeFigures:
    gpus = _gpus(rec)
    util, power, mem = _gpu_figures(gpus)
    rss = field(rec, "rss") if isinstance(rec.get("rss"), int) else None
    reason = rec.get("gpu_unavailable")
    return NodeFigures(node, finite(rec.get("time")), len(gpus), util, power, mem, field(rec, "cpu_percent"),
                       int(rss) if rss is not None else None, energy,
                       reason if isinstance(reason, str) and not gpus else None)


def node_telemetry(records: Mapping[str, Sequence[Mapping[str, Any]]], energy: Mapping[str, RunEnergy],
                   run_energy: RunEnergy | None) -> NodeTelemetry | None:
    """Each node's figures from its newest record (`records`: node -> its records, oldest first; "" the
    run's own telemetry.jsonl) with its energy (`energy`, by node), and the total with the run's energy.
    None when no node has a record."""
    latest = {node: recs[-1] for node, recs in sorted(records.items()) if recs}
    if not latest:
        return None
    nodes = tuple(_node(node, rec, energy.get(node)) for node, rec in latest.items())
    every_gpu = [g for rec in latest.values() for g in _gpus(rec)]
    util, power, mem = _gpu_figures(every_gpu)
    times = [n.time for n in nodes if n.time is not None]
    reasons = [n.gpu_unavailable for n in nodes if n.gpu_unavailable]
    total = NodeFigures("", max(times) if times else None, len(every_gpu), util, power, mem,
                        _added([n.cpu_percent for n in nodes]), _added([n.rss for n in nodes]), run_energy,
                        reasons[0] if reasons and not every_gpu else None)
    return NodeTelemetry(nodes, total)
