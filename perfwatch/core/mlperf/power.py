"""MLPerf power logs: the energy-to-train of one result file, as MLCommons' result summarizer computes it.

Since Training v4.0 a result may carry power measurements beside it (`core/layout.py` names the files):

    <benchmark>/result_X.txt
    <benchmark>/power/result_X/node_N.txt   power_measurement_start / _stop, power_reading (W), conversion_eff
    <benchmark>/power/result_X/sw_N.txt     interconnect_power_est (W), conversion_eff

The summarizer (`result_summarizer._compute_total_power`) turns them into joules per run:

- a node log's records are sorted by time; from `power_measurement_start` on, until
  `power_measurement_stop`, each `power_reading` adds `watts × (its time - the previous record's time)`;
  the node's energy is `conversion_eff × that sum × time_to_train / (stop - start) / 1000`
  (the mean power over the measurement window, times the run's time-to-train). No stop record: the
  last reading's time stands in for it. No start record: the summarizer stops (ValueError).
- a switch log's first `interconnect_power_est` is its power; `conversion_eff × watts × time_to_train / 1000`.
- the run's energy is the sum over its nodes and switches, in joules.

The arithmetic below is the summarizer's, in its order, so the numbers are equal to the last bit (but
for the summation order of the nodes, which the summarizer takes in directory order). Where the
summarizer cannot compute a number (no node log, a stop at the start's time: it divides by zero)
`PowerError` says why, so a folder can say so instead of failing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from perfwatch.core.ingest.discover import is_regular, open_regular
from perfwatch.core.ingest.mllog import TOKEN
from perfwatch.core.layout import POWER_DIR, POWER_NODE_PREFIX, POWER_SWITCH_PREFIX, power_folder

POWER_START = "power_measurement_start"
POWER_STOP = "power_measurement_stop"
POWER_READING = "power_reading"
CONVERSION_EFF = "conversion_eff"
INTERCONNECT_POWER = "interconnect_power_est"
SOURCE = "MLPerf power log"  # how these joules were measured, beside perfwatch's own NVML energy


class PowerError(ValueError):
    """The summarizer's energy computation cannot be done for this run: the message says why."""


class PowerRecord(msgspec.Struct, gc=False):
    """The fields of a power log's record the energy reads (the rest of each record is skipped unread)."""

    time_ms: float
    key: str
    value: Any = None


_decode = msgspec.json.Decoder(PowerRecord).decode


def records(path: Path) -> list[PowerRecord]:
    """A power log's records as MLPerf's parser finds them: the JSON after the last `:::MLLOG ` of a line
    (read as latin-1 where it is not UTF-8); a line that does not decode is skipped, as the summarizer
    skips it."""
    with open_regular(path) as fh:
        data = fh.read()
    out: list[PowerRecord] = []
    append = out.append
    skip = len(TOKEN)
    for line in data.split(b"\n"):
        at = line.rfind(TOKEN)
        if at < 0:
            continue
        try:
            append(_decode(line[at + skip:]))
        except msgspec.DecodeError:
            try:
                append(_decode(line[at + skip:].decode("latin-1").encode()))
            except msgspec.DecodeError:
                continue
    return out


class NodePower(msgspec.Struct, frozen=True):
    """One node log, reduced to what the energy needs: `watt_ms` is the summed watts × ms of the readings
    inside the measurement window, `window_ms` that window (stop - start)."""

    name: str
    watt_ms: float
    window_ms: float
    conversion_eff: float


class SwitchPower(msgspec.Struct, frozen=True):
    name: str
    watts: float
    conversion_eff: float


class PowerLogs(msgspec.Struct, frozen=True):
    """A result file's power measurement: every node and switch log of `folder`."""

    folder: str
    nodes: tuple[NodePower, ...]
    switches: tuple[SwitchPower, ...]

    def energy_j(self, time_to_train_ms: float) -> float:
        """Energy-to-train in joules for a run of `time_to_train_ms` (the summarizer's formula and order)."""
        ttt = float(time_to_train_ms)
        total = 0.0
        for n in self.nodes:
            total += n.conversion_eff * n.watt_ms * ttt / n.window_ms / 1000
        for s in self.switches:
            total += s.conversion_eff * s.watts * ttt / 1000
        return total


def has_power(benchmark_folder: Path | str) -> bool:
    """The folder holds a `power/` sub-folder: its runs are scored for energy too (the summarizer's `_has_power`)."""
    return (Path(benchmark_folder) / POWER_DIR).is_dir()


def _logs(folder: Path, prefix: str) -> list[Path]:
    """`prefix*.txt` in `folder` (the summarizer's glob), in name order."""
    try:
        names = sorted(n for n in (p.name for p in folder.iterdir())
                       if n.startswith(prefix) and n.endswith(".txt"))
    except OSError:
        return []
    return [folder / n for n in names if is_regular(folder / n)]


def _number(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PowerError(f"{where}: {what} {value!r} is not a number")
    return value


def read_node(path: Path) -> NodePower:
    """One node log as the summarizer's `_compute_power_node` walks it (records in time order)."""
    wanted = (POWER_START, POWER_STOP, POWER_READING, CONVERSION_EFF)
    ordered = sorted((e for e in records(path) if e.key in wanted), key=lambda e: e.time_ms)
    prev = last = start = stop = 0.0
    watt_ms: float = 0
    eff: float = 1.0
    start_found = stop_found = False
    where = f"{path.parent.name}/{path.name}"
    for e in ordered:
        key = e.key
        if key == POWER_READING:  # most records: tested first, the number checked inline
            if start_found and not stop_found:
                value = e.value
                if type(value) is not int and type(value) is not float:
                    _number(value, POWER_READING, where)  # raises PowerError
                t = e.time_ms
                watt_ms += value * (t - prev)
                prev = t
                if t > last:
                    last = t
        elif key == POWER_START:
            start = prev = e.time_ms
            start_found = True
        elif key == POWER_STOP:
            stop, stop_found = e.time_ms, True
        elif key == CONVERSION_EFF:
            eff = _number(e.value, CONVERSION_EFF, where)
    if not start_found:
        raise PowerError(f"{where}: no {POWER_START} record (MLPerf's summarizer stops on it)")
    if not stop_found:
        stop = last
    if stop == start:
        said = f"{POWER_STOP} at the same time as {POWER_START}" if stop_found else \
            f"no {POWER_STOP} and no {POWER_READING} after {POWER_START}"
        raise PowerError(f"{where}: {said} ({start:.0f} ms): the energy divides the readings by a measurement "
                         "window of 0 ms (MLPerf's summarizer stops with ZeroDivisionError)")
    return NodePower(path.name, float(watt_ms), stop - start, float(eff))


def read_switch(path: Path) -> SwitchPower:
    """One switch log as the summarizer's `_compute_power_sw` reads it: file order, up to the first estimate."""
    eff: float = 1.0
    watts: float = 0.0
    where = f"{path.parent.name}/{path.name}"
    for e in records(path):
        if e.key == CONVERSION_EFF:
            eff = _number(e.value, CONVERSION_EFF, where)
        elif e.key == INTERCONNECT_POWER:
            watts = _number(e.value, INTERCONNECT_POWER, where)
            break
    return SwitchPower(path.name, float(watts), float(eff))


def read_power(result_file: Path | str) -> PowerLogs:
    """The power logs of one result file; PowerError when the summarizer could not use them."""
    folder = power_folder(result_file)
    nodes = _logs(folder, POWER_NODE_PREFIX)
    if not nodes:
        raise PowerError(f"no {POWER_DIR}/{folder.name}/{POWER_NODE_PREFIX}*.txt "
                         "(MLPerf's summarizer stops on a run without node power logs)")
    try:
        return PowerLogs(str(folder), tuple(read_node(p) for p in nodes),
                         tuple(read_switch(p) for p in _logs(folder, POWER_SWITCH_PREFIX)))
    except OSError as exc:
        raise PowerError(f"{folder.name}: cannot read a power log ({exc.strerror or exc})") from exc


class RunPower(msgspec.Struct, frozen=True):
    """One run's energy-to-train from its power logs: joules, or why there are none."""

    joules: float | None
    nodes: int = 0
    switches: int = 0
    problem: str | None = None


def run_power(result_file: Path | str, time_to_train_ms: float | None) -> RunPower:
    """Energy-to-train of a result file whose run has `time_to_train_ms` (None: it has no time-to-train)."""
    try:
        logs = read_power(result_file)
    except PowerError as exc:
        return RunPower(None, problem=str(exc))
    if time_to_train_ms is None:
        return RunPower(None, len(logs.nodes), len(logs.switches), "no time-to-train")
    return RunPower(logs.energy_j(time_to_train_ms), len(logs.nodes), len(logs.switches))
