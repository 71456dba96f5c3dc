"""HostSampler with real psutil: host readings and a real process tree."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from perfwatch.core.telemetry.host import HostSampler

# a parent that starts a child and both wait; killed by the fixture
TREE = (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(c.pid, flush=True)\n"
    "time.sleep(60)\n"
)
BUSY = "import time\nend = time.time() + 60\nwhile time.time() < end:\n    pass\n"


@pytest.fixture
def tree() -> Iterator[tuple[int, int]]:
    parent = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        yield parent.pid, child
    finally:
        for pid in (child, parent.pid):
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()
        parent.wait(10)


def test_host_readings_are_real() -> None:
    sampler = HostSampler()
    first = sampler.sample().host
    assert first is not None
    assert first.disk_read_bps is None and first.net_rx_bps is None  # a rate needs two samples
    second = sampler.sample().host
    assert second is not None
    assert second.cpu_percent is not None and 0.0 <= second.cpu_percent <= 100.0
    assert len(second.cpu_per_core) == psutil.cpu_count()
    assert second.mem_total == psutil.virtual_memory().total
    assert second.mem_used is not None and 0 < second.mem_used <= second.mem_total
    assert second.swap_total is not None
    # one /proc/meminfo read gives what psutil gives (memory moves between the reads: a small tolerance)
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    assert abs(second.mem_used - (vm.total - vm.available)) < 64 << 20
    assert second.mem_percent is not None and abs(second.mem_percent - vm.percent) < 1.0
    assert second.swap_total == sw.total and second.swap_used is not None
    assert abs(second.swap_used - sw.used) < 64 << 20
    for rate in (second.disk_read_bps, second.disk_write_bps, second.net_rx_bps, second.net_tx_bps):
        assert rate is None or rate >= 0.0
    if psutil.net_io_counters() is not None:
        assert second.net_rx_bps is not None


def test_process_tree_includes_children_and_sums_rss(tree: tuple[int, int]) -> None:
    parent, child = tree
    sampler = HostSampler()
    snap = sampler.sample({"run-a": [parent]})
    t = snap.runs["run-a"]
    assert set(t.pids) == {parent, child}
    rss = psutil.Process(parent).memory_info().rss + psutil.Process(child).memory_info().rss
    assert t.rss is not None and t.rss == pytest.approx(rss, rel=0.2)
    assert t.cpu_percent is not None and t.cpu_percent >= 0.0


def test_busy_process_cpu_is_seen_after_priming() -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        sampler = HostSampler()
        sampler.sample({"r": [busy.pid]})  # primes the per-process counter (first reading is 0)
        time.sleep(0.5)
        t = sampler.sample({"r": [busy.pid]}).runs["r"]
        assert t.cpu_percent is not None and t.cpu_percent > 0.0
    finally:
        busy.kill()
        busy.wait(10)


def test_a_finished_run_has_no_live_processes(tree: tuple[int, int]) -> None:
    parent, child = tree
    sampler = HostSampler()
    assert sampler.sample({"r": [parent]}).runs["r"].alive
    for pid in (child, parent):
        psutil.Process(pid).kill()
    psutil.Process(parent).wait(10)  # reap our direct child; the grandchild is reaped by init (or a zombie)
    t = sampler.sample({"r": [parent]}).runs["r"]
    assert not t.alive and t.cpu_percent is None and t.rss is None


def test_unknown_pids_are_not_an_error() -> None:
    t = HostSampler().sample({"ghost": [2**22 + 12345]}).runs["ghost"]
    assert not t.alive


def test_process_tree_without_proc_children_files(tree: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    from perfwatch.core.telemetry import host as telemetry_host

    monkeypatch.setattr(telemetry_host, "_PROC_CHILDREN", False)  # the portable scan of every process
    parent, child = tree
    assert set(HostSampler().sample({"r": [parent]}).runs["r"].pids) == {parent, child}
