"""The Prometheus/OpenMetrics endpoint: `--metrics-port` on launch and attach.

A custom collector reads the latest `LiveSnapshot` at scrape time, so nothing happens per
log line and an idle endpoint costs nothing. Every per-run number is a column of
`perfwatch report`'s rows (`results.summary.run_row` + `metrics_columns`), computed by the
same functions; rows are cached per run until the run's view or its telemetry file changes.
Metric names and units are documented in docs/metrics.md.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from perfwatch.core.layout import TELEMETRY_FILE
from perfwatch.core.results.summary import metrics_columns, run_row
from perfwatch.exporters.source import LiveRun, LiveSnapshot, Source

RUN_LABELS = ["campaign", "run", "job", "benchmark", "state"]
GPU_LABELS = ["gpu", "uuid", "name", "run"]
DEFAULT_HOST = "127.0.0.1"

# (metric suffix, help text, report row key, scale): one gauge per run for each
RUN_GAUGES: list[tuple[str, str, str, float]] = [
    ("samples_per_second", "Throughput over the rolling window (report: samples_per_s_window)",
     "samples_per_s_window", 1.0),
    ("samples_per_second_mean", "Mean throughput over the whole run (report: throughput_mean)",
     "throughput_mean", 1.0),
    ("tokens_per_second", "Tokens/s over the rolling window (report: tokens_per_s)", "tokens_per_s", 1.0),
    ("mfu_ratio", "Model FLOPs utilization, 0..1 (report: mfu)", "mfu", 1.0),
    ("eval_best", "Best eval metric so far (report: best_eval)", "best_eval", 1.0),
    ("time_to_train_seconds", "Time-to-train, run_start to run_stop (report: time_to_train_ms / 1000)",
     "time_to_train_ms", 1e-3),
    ("bad_lines", "Log lines that are not valid MLLOG records (report: bad_lines)", "bad_lines", 1.0),
    ("gpu_utilization_mean_percent", "Mean GPU utilization over the run's telemetry (report: gpu_util_mean)",
     "gpu_util_mean", 1.0),
    ("power_mean_watts", "Mean GPU power of the run (report: power_mean_w)", "power_mean_w", 1.0),
    ("cpu_mean_percent", "Mean CPU of the run's process tree (report: cpu_mean)", "cpu_mean", 1.0),
    ("energy_to_train_joules", "GPU energy from run_start to run_stop (report: energy_to_train_kj x 1000)",
     "energy_to_train_kj", 1e3),
    ("energy_joules", "GPU energy of the whole run so far (report: energy_run_kj x 1000)", "energy_run_kj", 1e3),
    ("samples_per_joule", "Training samples per joule of GPU energy (report: samples_per_j)", "samples_per_j", 1.0),
]


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


class RowCache:
    """Report rows per run, rebuilt only when the run's view or telemetry.jsonl changed."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def rows(self, snap: LiveSnapshot) -> dict[str, dict[str, Any]]:
        extra: Callable[[Any], dict[str, Any]] | None = None
        out: dict[str, dict[str, Any]] = {}
        for live in snap.runs:
            view = live.view
            if view is None:
                continue
            key = (view.version, _stat(Path(view.path).parent / TELEMETRY_FILE) if view.path else None)
            cached = self._rows.get(view.run_id)
            if cached is None or cached[0] != key:
                if extra is None:
                    extra = metrics_columns(logdir=snap.root)  # CPU peak: the stored one, never measured here
                cached = (key, run_row(view, snap.root, extra))
                self._rows[view.run_id] = cached
            out[view.run_id] = cached[1]
        return out


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class PerfwatchCollector(Collector):
    """Turns one snapshot into metric families (called by prometheus_client on every scrape)."""

    def __init__(self, source: Source | None = None) -> None:
        self.source = source
        self._cache = RowCache()
        self._lock = threading.Lock()  # the HTTP server answers each scrape on its own thread

    def collect(self) -> Iterator[Metric]:
        if self.source is None:
            return iter(())
        with self._lock:
            snap = self.source.snapshot()
            rows = self._cache.rows(snap)
            return iter(families(snap, rows))


def families(snap: LiveSnapshot, rows: dict[str, dict[str, Any]]) -> list[Metric]:
    """Every metric family of one snapshot (pure: the collector's whole output)."""
    out: list[Metric] = []
    run_fams = {suffix: GaugeMetricFamily(f"perfwatch_run_{suffix}", doc, labels=RUN_LABELS)
                for suffix, doc, _, _ in RUN_GAUGES}
    info = GaugeMetricFamily("perfwatch_run_info", "One series per run: its labels (value 1)", labels=RUN_LABELS)
    last = GaugeMetricFamily("perfwatch_run_eval_last", "Latest eval metric value", labels=RUN_LABELS)
    target = GaugeMetricFamily("perfwatch_run_eval_target", "The run's target for its eval metric",
                               labels=RUN_LABELS)
    reached = GaugeMetricFamily("perfwatch_run_target_reached", "1 once the eval metric reached the target",
                                labels=RUN_LABELS)
    elapsed = GaugeMetricFamily("perfwatch_run_elapsed_seconds",
                                "Since run_start: time-to-train once stopped, else up to the latest record",
                                labels=RUN_LABELS)
    findings = GaugeMetricFamily("perfwatch_run_compliance_findings",
                                 "Live MLPerf compliance findings (errors and warnings)", labels=RUN_LABELS)
    compliant = GaugeMetricFamily("perfwatch_run_compliance_ok",
                                  "1 pass / 0 fail as the official checker is expected to judge; absent "
                                  "while undecided", labels=RUN_LABELS)
    eta = GaugeMetricFamily("perfwatch_run_eta_seconds",
                            "Predicted time left until the eval metric reaches the target (while converging)",
                            labels=RUN_LABELS)
    eta_pm = GaugeMetricFamily("perfwatch_run_eta_plus_minus_seconds",
                               "Uncertainty of the ETA; absent when the ETA is only a lower bound",
                               labels=RUN_LABELS)
    proc_cpu = GaugeMetricFamily("perfwatch_run_process_cpu_percent",
                                 "CPU of the run's live process tree now (can exceed 100)", labels=RUN_LABELS)
    proc_rss = GaugeMetricFamily("perfwatch_run_process_rss_bytes", "RSS of the run's live process tree now",
                                 labels=RUN_LABELS)
    tele = snap.telemetry
    gpu_runs: dict[int, list[str]] = {}
    for live in snap.runs:
        labels = _run_labels(snap, live)
        info.add_metric(labels, 1.0)
        view, row = live.view, rows.get(live.run_id, {})
        if view is None:
            continue
        for suffix, _, key, scale in RUN_GAUGES:
            value = _num(row.get(key))
            if value is not None:
                run_fams[suffix].add_metric(labels, value * scale)
        if (v := _num(view.last_eval)) is not None:
            last.add_metric(labels, v)
        if view.target is not None:
            target.add_metric(labels, float(view.target.value))
            reached.add_metric(labels, 1.0 if view.target_reached else 0.0)
        if (v := _num(view.elapsed_ms)) is not None:
            elapsed.add_metric(labels, v / 1000.0)
        findings.add_metric(labels, float(len(view.findings)))
        if view.compliance_ok is not None:
            compliant.add_metric(labels, 1.0 if view.compliance_ok else 0.0)
        if live.eta is not None and (left := live.eta.remaining_ms(view.elapsed_ms)) is not None:
            eta.add_metric(labels, left / 1000.0)
            if (pm := _num(live.eta.plus_minus_ms)) is not None:
                eta_pm.add_metric(labels, pm / 1000.0)
        tree = tele.runs.get(view.run_id) if tele is not None else None
        if tree is not None and tree.alive:
            if (v := _num(tree.cpu_percent)) is not None:
                proc_cpu.add_metric(labels, v)
            if (v := _num(tree.rss)) is not None:
                proc_rss.add_metric(labels, v)
    for live in snap.runs:
        if live.alive:
            for index in live.devices:
                gpu_runs.setdefault(index, []).append(live.run_id)
    out += [info, *run_fams.values(), last, target, reached, elapsed, eta, eta_pm, findings, compliant, proc_cpu,
            proc_rss]
    out += _campaign(snap)
    if tele is not None:
        out += _gpus(tele, gpu_runs)
        out += _host(tele)
    return out


def _run_labels(snap: LiveSnapshot, live: LiveRun) -> list[str]:
    bench = live.view.benchmark if live.view is not None else None
    return [snap.campaign, live.run_id, live.job, bench or "", live.state]


def _campaign(snap: LiveSnapshot) -> list[Metric]:
    fam = GaugeMetricFamily("perfwatch_campaign_runs", "Runs of the campaign per state",
                            labels=["campaign", "state"])
    counts: dict[str, int] = {}
    for live in snap.runs:
        counts[live.state] = counts.get(live.state, 0) + 1
    for state, n in sorted(counts.items()):
        fam.add_metric([snap.campaign, state], float(n))
    target = GaugeMetricFamily("perfwatch_campaign_runs_target", "Runs of the campaign by where they stand "
                               "against their target (reached, not reached, no target)", labels=["campaign", "verdict"])
    for verdict, n in snap.counts.verdicts.items():
        target.add_metric([snap.campaign, verdict], float(n))
    failed = GaugeMetricFamily("perfwatch_campaign_runs_failed", "Runs that ended without finishing and without "
                               "reaching their target", labels=["campaign"])
    failed.add_metric([snap.campaign], float(snap.counts.failed))
    return [fam, target, failed]


_GPU_GAUGES: list[tuple[str, str, str, float]] = [
    ("utilization_percent", "Share of time a kernel ran (NVML GPU utilization)", "util_sm", 1.0),
    ("memory_utilization_percent", "Share of time the memory controller was busy", "util_mem", 1.0),
    ("memory_used_bytes", "Device memory in use", "mem_used", 1.0),
    ("memory_total_bytes", "Device memory in total", "mem_total", 1.0),
    ("power_watts", "Board power draw", "power_w", 1.0),
    ("power_limit_watts", "Enforced power limit", "power_limit_w", 1.0),
    ("temperature_celsius", "GPU temperature", "temp_c", 1.0),
    ("sm_clock_hertz", "SM clock", "sm_clock", 1e6),
    ("memory_clock_hertz", "Memory clock", "mem_clock", 1e6),
]


def _gpus(tele: Any, gpu_runs: dict[int, list[str]]) -> list[Metric]:
    fams = {suffix: GaugeMetricFamily(f"perfwatch_gpu_{suffix}", doc, labels=GPU_LABELS)
            for suffix, doc, _, _ in _GPU_GAUGES}
    reasons = GaugeMetricFamily("perfwatch_gpu_clock_event_reason",
                                "1 for each clock event (throttle) reason active now",
                                labels=[*GPU_LABELS, "reason"])
    available = GaugeMetricFamily("perfwatch_gpus_available", "1 when NVML reports GPUs, 0 when it does not")
    status = tele.gpu
    if status is not None:
        available.add_metric([], 1.0 if status.available else 0.0)
        for g in status.gpus:
            labels = [str(g.index), g.uuid or "", g.name or "", ",".join(gpu_runs.get(g.index, []))]
            for suffix, _, attr, scale in _GPU_GAUGES:
                value = _num(getattr(g, attr))
                if value is not None:
                    fams[suffix].add_metric(labels, value * scale)
            for reason in g.throttle or ():
                reasons.add_metric([*labels, reason], 1.0)
    return [available, *fams.values(), reasons]


def _host(tele: Any) -> list[Metric]:
    host = tele.host
    cpu = GaugeMetricFamily("perfwatch_host_cpu_percent", "Host CPU busy, mean over cores (0..100)")
    used = GaugeMetricFamily("perfwatch_host_memory_used_bytes", "Host memory in use")
    total = GaugeMetricFamily("perfwatch_host_memory_total_bytes", "Host memory in total")
    if host is not None:
        for fam, value in ((cpu, host.cpu_percent), (used, host.mem_used), (total, host.mem_total)):
            if (v := _num(value)) is not None:
                fam.add_metric([], v)
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

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def serve(self, source: Source) -> None:
        self.collector.source = source

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        source, self.collector.source = self.collector.source, None
        if source is not None:
            source.close()


def bind(host: str, port: int) -> MetricsServer:
    """Start listening on host:port; OSError with a message a user understands when that is impossible."""
    if not 1 <= port <= 65535:
        raise OSError(f"--metrics-port {port}: out of range (1-65535)")
    try:
        return MetricsServer(host, port)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise OSError(f"--metrics-port {port}: cannot listen on {host}:{port}: {why}") from None
