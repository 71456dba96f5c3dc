"""The Prometheus/OpenMetrics endpoint: `--metrics-port` on launch and attach.

A custom collector reads the latest `ExportSnapshot` at scrape time, so nothing happens per
log line and an idle endpoint costs nothing. Every number the live engine computes (state,
counts, throughput now and on average, MFU, ETA, energy) is taken from its snapshot as it is,
so a scrape says what the TUI and `--headless` show; the run's log view (in the same snapshot)
gives eval, target and time-to-train. Only the means of a run's telemetry, which no live view
shows, are `perfwatch report`'s columns, followed incrementally per run (`TelemetryRows`).

The shape follows Prometheus's conventions: every series of a run carries the same identity
labels for its whole life (`campaign`, `logdir`, `hostname`, `run`); the run's state is a
StateSet and its job an info metric, never labels on value series; base units (seconds,
bytes, joules, ratios 0..1) with `# UNIT` in OpenMetrics; cumulative counts are counters.
GPU series carry the DCGM exporter's labels (`gpu`, `UUID`, `pci_bus_id`, `modelName`,
`Hostname`) so they join with its series. Names and the mapping are in docs/metrics.md.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

from perfwatch.core.layout import TELEMETRY_FILE, node_telemetry_files
from perfwatch.core.measure.columns import LiveTelemetry
from perfwatch.core.model.status import State
from perfwatch.exporters.source import ExportSnapshot, LiveRun, Source
from perfwatch.text.escape import printable

RUN_LABELS = ["campaign", "logdir", "hostname", "run"]  # a run's identity: the same on every series, all its life
GPU_LABELS = ["gpu", "UUID", "pci_bus_id", "modelName", "Hostname"]  # the DCGM exporter's label names
HOST_LABELS = ["hostname"]
RANK_LABELS = [*RUN_LABELS, "rank", "node"]  # a distributed run's rank (node: where it runs)
CAMPAIGN_LABELS = RUN_LABELS[:3]  # campaign, logdir, hostname
_ENDED = frozenset(word.value for word in State if word.ended)
DEFAULT_HOST = "127.0.0.1"
SIGNIFICANT_DIGITS = 15  # a double's decimal precision: drops float noise (2.0100000000000002 -> 2.01)

# (name, help text, what the engine's snapshot says for the run, unit): one gauge per run, the TUI's numbers
ENGINE_GAUGES: list[tuple[str, str, Callable[[LiveRun], Any], str]] = [
    ("perfwatch_run_samples_per_second", "Samples/s over the rolling window (the TUI's samp/s)",
     lambda r: r.figures.samples_now if r.figures else None, ""),
    ("perfwatch_run_samples_per_second_mean", "Mean samples/s over the whole run (the TUI's avg)",
     lambda r: r.figures.samples_avg if r.figures else None, ""),
    ("perfwatch_run_tokens_per_second", "Tokens/s over the rolling window",
     lambda r: r.figures.tokens_now if r.figures else None, ""),
    ("perfwatch_run_mfu_ratio", "Model FLOPs utilization, 0..1 (the TUI's MFU)",
     lambda r: r.figures.mfu.value if r.figures and r.figures.mfu else None, "ratio"),
    ("perfwatch_run_eval_best", "Best eval metric so far", lambda r: r.view.best_eval if r.view else None, ""),
    ("perfwatch_run_time_to_train_seconds", "Time-to-train, run_start to run_stop",
     lambda r: r.view.time_to_train_ms / 1000 if r.view and r.view.time_to_train_ms is not None else None,
     "seconds"),
    ("perfwatch_run_energy_to_train_joules", "GPU energy from run_start to run_stop (the TUI's energy)",
     lambda r: r.energy.to_train.energy.joules if r.energy and r.energy.to_train else None, "joules"),
    ("perfwatch_run_samples_per_joule", "Training samples per joule of GPU energy",
     lambda r: r.energy.to_train.samples_per_joule if r.energy and r.energy.to_train else None, ""),
]
# counters: counts and amounts that only grow over a run's life
ENGINE_COUNTERS: list[tuple[str, str, Callable[[LiveRun], Any], str]] = [
    ("perfwatch_run_bad_lines", "Log lines that are not valid MLLOG records",
     lambda r: r.view.bad_count if r.view else None, ""),
    ("perfwatch_run_energy_joules", "GPU energy of the whole run so far",
     lambda r: r.energy.whole.joules if r.energy and r.energy.whole else None, "joules"),
]
# (name, help text, report row key, divisor, unit): the means of the run's telemetry, which the engine does not
# compute (no live view shows them): `perfwatch report`'s columns of the same name
RUN_GAUGES: list[tuple[str, str, str, float, str]] = [
    ("perfwatch_run_gpu_utilization_mean_ratio",
     "Mean GPU utilization over the run's telemetry, 0..1 (report: gpu_util_mean / 100)", "gpu_util_mean", 100,
     "ratio"),
    ("perfwatch_run_power_mean_watts", "Mean GPU power of the run (report: power_mean_w)", "power_mean_w", 1,
     "watts"),
    ("perfwatch_run_cpu_mean_ratio",
     "Mean CPU of the run's process tree, 1 = one core busy (report: cpu_mean / 100)", "cpu_mean", 100, "ratio"),
]
# (name, help text, key of one node in the report row's telemetry_nodes, divisor, unit): a run sampled on
# its compute nodes (Slurm, docs/slurm.md) gets one series per node, label `node`; RUN_GAUGES are the totals
NODE_GAUGES: list[tuple[str, str, str, float, str]] = [
    ("perfwatch_run_node_gpu_utilization_mean_ratio",
     "Mean GPU utilization on one compute node of the run, 0..1 (report: telemetry_nodes)", "gpu_util_mean", 100,
     "ratio"),
    ("perfwatch_run_node_power_mean_watts", "Mean GPU power on one compute node of the run (report: telemetry_nodes)",
     "power_mean_w", 1, "watts"),
    ("perfwatch_run_node_cpu_mean_ratio",
     "Mean CPU of the run's processes on one compute node, 1 = one core busy (report: telemetry_nodes)", "cpu_mean",
     100, "ratio"),
]

def _texts(*values: str) -> list[str]:
    """Label values from disk and logs (names, paths), control characters shown as escapes."""
    return [printable(v) for v in values]


def clean(value: Any, divisor: float = 1) -> float | None:
    """A finite number as a float without float noise (`value / divisor`), else None (the series is left out)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(f"{value / divisor:.{SIGNIFICANT_DIGITS}g}")


class TelemetryRows:
    """Per run, the columns of its telemetry's summary that `perfwatch report` prints (means, per node), the
    only per-run numbers the engine does not publish. Each run's telemetry.jsonl (and, for a Slurm run, its
    nodes' files) is followed incrementally: a scrape parses only the samples appended since the last, and
    the columns are rebuilt only when samples came."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[int, dict[str, Any]]] = {}
        self._telemetry: dict[str, LiveTelemetry] = {}

    def rows(self, snap: ExportSnapshot) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for live in snap.runs:
            view = live.view
            if view is None:
                continue
            tele = self._follow(view.run_id, view.path)
            if tele is None or not tele.columns.samples:
                continue
            cached = self._rows.get(view.run_id)
            if cached is None or cached[0] != tele.version:
                cached = self._rows[view.run_id] = (tele.version, tele.columns.summary_columns())
            out[view.run_id] = cached[1]
        return out

    def _follow(self, run_id: str, log_path: str | None) -> LiveTelemetry | None:
        tele = self._telemetry.get(run_id)
        if tele is None:
            path = Path(log_path).parent / TELEMETRY_FILE if log_path else None
            if path is None or not (path.exists() or node_telemetry_files(path.parent)):  # Slurm: the nodes' files
                return None
            tele = self._telemetry[run_id] = LiveTelemetry(str(path))
        tele.poll()
        return tele

    def close(self) -> None:
        for tele in self._telemetry.values():
            tele.close()
        self._telemetry.clear()


class PerfwatchCollector(Collector):
    """Turns one snapshot into metric families (called by prometheus_client on every scrape)."""

    def __init__(self, source: Source | None = None) -> None:
        self.source = source
        self.scrapes = 0  # answered so far (the grace period after a campaign waits for some)
        self._cache = TelemetryRows()
        self._lock = threading.Lock()  # the HTTP server answers each scrape on its own thread

    def collect(self) -> Iterator[Metric]:
        if self.source is None:
            return iter(())
        with self._lock:
            snap = self.source.snapshot()
            rows = self._cache.rows(snap)
            self.scrapes += 1
            return iter(families(snap, rows))


def _gauge(name: str, doc: str, labels: list[str], unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels, unit=unit)


def families(snap: ExportSnapshot, rows: dict[str, dict[str, Any]]) -> list[Metric]:
    """Every metric family of one snapshot (pure: the collector's whole output). `rows`: per run, the
    telemetry columns of its report row (`TelemetryRows`); every other number is the snapshot's."""
    info = InfoMetricFamily("perfwatch_run", "One series per run, from queued on: its campaign job",
                            labels=RUN_LABELS)
    bench = InfoMetricFamily("perfwatch_run_benchmark",
                             "The benchmark the run's log names (submission_benchmark), once it names one",
                             labels=RUN_LABELS)
    state = StateSetMetricFamily("perfwatch_run_state",
                                 "The run's state: the controller's, or for logs nobody controls the log's status",
                                 labels=RUN_LABELS)
    gauges = {name: _gauge(name, doc, RUN_LABELS, unit) for name, doc, _, unit in ENGINE_GAUGES}
    gauges.update({name: _gauge(name, doc, RUN_LABELS, unit) for name, doc, _, _, unit in RUN_GAUGES})
    node_gauges = {name: _gauge(name, doc, [*RUN_LABELS, "node"], unit) for name, doc, _, _, unit in NODE_GAUGES}
    counters = {name: CounterMetricFamily(name, doc, labels=RUN_LABELS, unit=unit)
                for name, doc, _, unit in ENGINE_COUNTERS}
    last = _gauge("perfwatch_run_eval_last", "Latest eval metric value", RUN_LABELS)
    target = _gauge("perfwatch_run_eval_target", "The run's target for its eval metric", RUN_LABELS)
    reached = _gauge("perfwatch_run_target_reached", "1 once the eval metric reached the target", RUN_LABELS)
    elapsed = _gauge("perfwatch_run_elapsed_seconds",
                     "Since run_start: time-to-train once stopped, else up to the latest record", RUN_LABELS, "seconds")
    findings = CounterMetricFamily("perfwatch_run_compliance_findings",
                                   "Live MLPerf compliance findings (errors and warnings)", labels=RUN_LABELS)
    compliant = _gauge("perfwatch_run_compliance_ok",
                       "1 pass / 0 fail as the official checker is expected to judge; absent while undecided",
                       RUN_LABELS)
    eta = _gauge("perfwatch_run_eta_seconds",
                 "Predicted time left until the eval metric reaches the target (while converging)", RUN_LABELS,
                 "seconds")
    eta_pm = _gauge("perfwatch_run_eta_plus_minus_seconds",
                    "Uncertainty of the ETA; absent when the ETA is only a lower bound", RUN_LABELS, "seconds")
    proc_cpu = _gauge("perfwatch_run_process_cpu_ratio",
                      "CPU of the run's live process tree now, 1 = one core busy (can exceed 1)", RUN_LABELS, "ratio")
    proc_rss = _gauge("perfwatch_run_process_resident_memory_bytes", "RSS of the run's live process tree now",
                      RUN_LABELS, "bytes")
    rank_fams = _rank_families()
    tele = snap.telemetry
    gpu_runs: dict[int, list[list[str]]] = {}
    for live in snap.runs:
        labels = _texts(snap.campaign, snap.logdir, snap.hostname, live.run_id)
        info.add_metric(labels, {"campaign_job": printable(live.job)})
        state.add_metric(labels, {word.value: word.value == live.state for word in State})
        if live.ranks is not None:
            _add_ranks(rank_fams, labels, live.ranks)
        if live.alive:
            for index in live.devices:
                gpu_runs.setdefault(index, []).append(labels)
        view, row = live.view, rows.get(live.run_id, {})
        if view is None:
            continue
        if view.benchmark:
            bench.add_metric(labels, {"benchmark": printable(view.benchmark)})
        for name, _, engine_says, _ in ENGINE_GAUGES:
            if (v := clean(engine_says(live))) is not None:
                gauges[name].add_metric(labels, v)
        for name, _, engine_says, _ in ENGINE_COUNTERS:
            if (v := clean(engine_says(live))) is not None:
                counters[name].add_metric(labels, v)
        for name, _, key, divisor, _ in RUN_GAUGES:
            if (v := clean(row.get(key), divisor)) is not None:
                gauges[name].add_metric(labels, v)
        nodes = row.get("telemetry_nodes")
        for node, figures in (nodes.items() if isinstance(nodes, dict) else ()):
            for name, _, key, divisor, _ in NODE_GAUGES:
                if (v := clean(figures.get(key), divisor)) is not None:
                    node_gauges[name].add_metric([*labels, printable(str(node))], v)
        if (v := clean(view.last_eval)) is not None:
            last.add_metric(labels, v)
        if view.target is not None and (v := clean(view.target.value)) is not None:
            target.add_metric(labels, v)
            reached.add_metric(labels, 1.0 if view.target_reached else 0.0)
        if (v := clean(view.elapsed_ms, 1000)) is not None:
            elapsed.add_metric(labels, v)
        findings.add_metric(labels, float(len(view.findings)))
        if view.compliance_ok is not None:
            compliant.add_metric(labels, 1.0 if view.compliance_ok else 0.0)
        if live.eta is not None and (v := clean(live.eta.remaining_ms(view.elapsed_ms), 1000)) is not None:
            eta.add_metric(labels, v)
            if (pm := clean(live.eta.plus_minus_ms, 1000)) is not None:
                eta_pm.add_metric(labels, pm)
        tree = tele.runs.get(view.run_id) if tele is not None else None
        if tree is not None and tree.alive:
            if (v := clean(tree.cpu_percent, 100)) is not None:
                proc_cpu.add_metric(labels, v)
            if (v := clean(tree.rss)) is not None:
                proc_rss.add_metric(labels, v)
    out: list[Metric] = [info, bench, state, *gauges.values(), *node_gauges.values(), *counters.values(), last, target,
                         reached, elapsed, eta, eta_pm, findings, compliant, proc_cpu, proc_rss, *rank_fams.values(),
                         *_campaign(snap)]
    if tele is not None:
        out += _gpus(tele, snap.hostname, gpu_runs)
        out += _host(tele, snap.hostname)
    return out


# (name, help, RankStats attribute, unit): one gauge per rank of a distributed run
RANK_GAUGES: list[tuple[str, str, str, str]] = [
    ("perfwatch_rank_step_seconds", "Median step time of the rank over the last minute", "step_median_s", "seconds"),
    ("perfwatch_rank_step_p95_seconds", "95th percentile step time of the rank over the last minute", "step_p95_s",
     "seconds"),
    ("perfwatch_rank_data_wait_ratio", "Share of the rank's last minute spent waiting for data, 0..1", "data_share",
     "ratio"),
    ("perfwatch_rank_collective_ratio", "Share of the rank's last minute spent in collectives, 0..1",
     "collective_share", "ratio"),
]


def _rank_families() -> dict[str, GaugeMetricFamily]:
    fams = {name: _gauge(name, doc, RANK_LABELS, unit) for name, doc, _, unit in RANK_GAUGES}
    fams["perfwatch_rank_straggler"] = _gauge(
        "perfwatch_rank_straggler", "1 for the rank the others wait for (docs/distributed.md), else 0", RANK_LABELS)
    return fams


def _add_ranks(fams: dict[str, GaugeMetricFamily], run_labels: list[str], report: Any) -> None:
    slow = report.straggler.rank if report.straggler is not None else None
    for r in report.ranks:
        labels = [*run_labels, str(r.rank), printable(r.node or "")]
        for name, _, attr, _ in RANK_GAUGES:
            if (v := clean(getattr(r, attr))) is not None:
                fams[name].add_metric(labels, v)
        fams["perfwatch_rank_straggler"].add_metric(labels, 1.0 if r.rank == slow else 0.0)


def _campaign(snap: ExportSnapshot) -> list[Metric]:
    """The engine's counts (core/model/status.py `Counts`), every state and verdict listed (0 included), so
    each count's series lives as long as the campaign's."""
    labels = _texts(snap.campaign, snap.logdir, snap.hostname)
    runs = _gauge("perfwatch_campaign_runs", "Runs of the campaign per state", [*CAMPAIGN_LABELS, "state"])
    for word in State:
        runs.add_metric([*labels, word.value], float(snap.counts.states.get(word.value, 0)))
    target = _gauge("perfwatch_campaign_runs_target", "Runs of the campaign by where they stand against their "
                    "target (reached, not reached, no target)", [*CAMPAIGN_LABELS, "verdict"])
    for verdict, n in snap.counts.verdicts.items():
        target.add_metric([*labels, verdict], float(n))
    failed = _gauge("perfwatch_campaign_runs_failed", "Runs that ended without finishing and without reaching "
                    "their target", CAMPAIGN_LABELS)
    failed.add_metric(labels, float(snap.counts.failed))
    return [runs, target, failed]


# (name, help text, GpuSample attribute, divisor, unit, type); the DCGM field each matches is in docs/metrics.md
_GPU_SERIES: list[tuple[str, str, str, float, str, str]] = [
    ("perfwatch_gpu_utilization_ratio", "Share of time a kernel ran, 0..1 (NVML GPU utilization)", "util_sm", 100,
     "ratio", "gauge"),
    ("perfwatch_gpu_memory_utilization_ratio", "Share of time the memory controller was busy, 0..1", "util_mem",
     100, "ratio", "gauge"),
    ("perfwatch_gpu_memory_used_bytes", "Device memory in use", "mem_used", 1, "bytes", "gauge"),
    ("perfwatch_gpu_memory_total_bytes", "Device memory in total", "mem_total", 1, "bytes", "gauge"),
    ("perfwatch_gpu_power_watts", "Board power draw", "power_w", 1, "watts", "gauge"),
    ("perfwatch_gpu_power_limit_watts", "Enforced power limit", "power_limit_w", 1, "watts", "gauge"),
    ("perfwatch_gpu_temperature_celsius", "GPU temperature", "temp_c", 1, "celsius", "gauge"),
    ("perfwatch_gpu_sm_clock_hertz", "SM clock", "sm_clock", 1e-6, "hertz", "gauge"),
    ("perfwatch_gpu_memory_clock_hertz", "Memory clock", "mem_clock", 1e-6, "hertz", "gauge"),
    ("perfwatch_gpu_energy_joules", "Energy since the driver loaded (NVML total energy)", "energy_mj", 1000,
     "joules", "counter"),
]


def _gpus(tele: Any, hostname: str, gpu_runs: dict[int, list[list[str]]]) -> list[Metric]:
    fams: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
        name: (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, doc, labels=GPU_LABELS,
                                                                               unit=unit)
        for name, doc, _, _, unit, kind in _GPU_SERIES}
    reasons = _gauge("perfwatch_gpu_clock_event_reason", "1 for each clock event (throttle) reason active now",
                     [*GPU_LABELS, "reason"])
    holders = InfoMetricFamily("perfwatch_gpu_run", "One series per GPU and live run the scheduler gave it "
                               "(the run's identity labels; its host is `Hostname`)", labels=GPU_LABELS)
    available = _gauge("perfwatch_gpus_available", "1 when NVML reports GPUs, 0 when it does not", HOST_LABELS)
    status = tele.gpu
    if status is not None:
        available.add_metric(_texts(hostname), 1.0 if status.available else 0.0)
        for g in status.gpus:
            labels = _texts(str(g.index), g.uuid or "", g.bus_id or "", g.name or "", hostname)
            for name, _, attr, divisor, _, _ in _GPU_SERIES:
                if (v := clean(getattr(g, attr), divisor)) is not None:
                    fams[name].add_metric(labels, v)
            for reason in g.throttle or ():
                reasons.add_metric([*labels, reason], 1.0)
            for run in gpu_runs.get(g.index, []):
                holders.add_metric(labels, {"campaign": run[0], "logdir": run[1], "run": run[3]})
    return [available, *fams.values(), reasons, holders]


def _host(tele: Any, hostname: str) -> list[Metric]:
    host = tele.host
    cpu = _gauge("perfwatch_host_cpu_utilization_ratio", "Host CPU busy, mean over cores, 0..1", HOST_LABELS,
                 "ratio")
    used = _gauge("perfwatch_host_memory_used_bytes", "Host memory in use", HOST_LABELS, "bytes")
    total = _gauge("perfwatch_host_memory_total_bytes", "Host memory in total", HOST_LABELS, "bytes")
    if host is not None:
        for fam, value, divisor in ((cpu, host.cpu_percent, 100), (used, host.mem_used, 1),
                                    (total, host.mem_total, 1)):
            if (v := clean(value, divisor)) is not None:
                fam.add_metric(_texts(hostname), v)
    return [cpu, used, total]


class MetricsServer:
    """The HTTP endpoint. `bind` first (a bad port fails before anything starts), `serve(source)` later."""

    def __init__(self, host: str, port: int) -> None:
        from prometheus_client import start_http_server

        self.collector = PerfwatchCollector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self._httpd, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._closed = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def serve(self, source: Source) -> None:
        self.collector.source = source

    def campaign_over(self) -> bool:
        """Whether every run of the served session has ended (its final states are there to scrape)."""
        source = self.collector.source
        if source is None:
            return False
        runs = source.snapshot().runs
        return bool(runs) and all(_ended(live) for live in runs)

    def linger(self, grace: float, *, scrapes: int = 2, step: float = 0.1) -> None:
        """Keep answering after the front end ended, so a scraper sees the final states: until `scrapes`
        more scrapes were answered or `grace` seconds passed (Ctrl-C ends it at once)."""
        seen = self.collector.scrapes
        deadline = time.monotonic() + grace
        try:
            while self.collector.scrapes < seen + scrapes and time.monotonic() < deadline:
                time.sleep(step)
        except KeyboardInterrupt:
            pass

    def close(self) -> None:
        """Stop listening; closing again does nothing (the TUI closes it early when a background owner takes over)."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        source, self.collector.source = self.collector.source, None
        if source is not None:
            source.close()
        with self.collector._lock:
            self.collector._cache.close()


def _ended(live: LiveRun) -> bool:
    return live.state in _ENDED


def bind(host: str, port: int) -> MetricsServer:
    """Start listening on host:port; OSError with a message a user understands when that is impossible."""
    if not 1 <= port <= 65535:
        raise OSError(f"--metrics-port {port}: out of range (1-65535)")
    try:
        return MetricsServer(host, port)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise OSError(f"--metrics-port {port}: cannot listen on {host}:{port}: {why}") from None
