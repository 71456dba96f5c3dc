"""The metrics endpoint as a real Prometheus server sees it (Debian's `prometheus` package).

A Prometheus on loopback scrapes two launches of the same campaign every second; its HTTP API then
says what a user's PromQL would see: one label set per series for a run's whole life, its own `job`
label untouched, the two LOGDIRs apart, and the final states scraped after the campaigns ended.
`promtool check metrics` lints the exposition.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import ROOT, campaign_file, wait_for
from test_metrics_endpoint import free_port

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")

CAMPAIGN = f"""
name: twin
scheduler: {{max_parallel: 2}}
jobs:
  - name: quick
    cmd: [{sys.executable}, {ROOT}/tests/workloads_fake/fake.py, --epochs, "3"]
  - name: hold
    cmd: [{sys.executable}, {ROOT}/tests/workloads_fake/fake.py, --gate, GATE, --epochs, "2"]
"""


def api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]


def query(port: int, promql: str) -> list[dict[str, Any]]:
    return list(api(port, "query", query=promql)["result"])


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus package (apt-get install prometheus)")
def test_prometheus_scrapes_two_campaigns_with_stable_labels_and_final_states(tmp_path: Path) -> None:
    assert PROMETHEUS is not None
    ports = [free_port(), free_port()]
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "perfwatch",
                            "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]}],
    }))
    prom_log = (tmp_path / "prometheus.log").open("wb")
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=prom_log, stderr=subprocess.STDOUT)
    launches: list[subprocess.Popen[str]] = []
    gates = [tmp_path / "gate0", tmp_path / "gate1"]
    try:
        assert wait_for(lambda: ready(prom_port), timeout=60, step=0.2), (tmp_path / "prometheus.log").read_text()
        for i, port in enumerate(ports):
            folder = tmp_path / f"yaml{i}"
            folder.mkdir()
            camp = campaign_file(folder, CAMPAIGN.replace("GATE", str(gates[i])))
            launches.append(subprocess.Popen(
                [sys.executable, "-m", "perfwatch", "launch", str(camp), "--headless",
                 "--logdir", str(tmp_path / f"logdir{i}"), "--metrics-port", str(port), "--metrics-grace", "60"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ)))

        def both_holding() -> bool:
            found = query(prom_port, 'perfwatch_run_state{run="hold.r0", perfwatch_run_state="running"} == 1')
            return len({r["metric"]["logdir"] for r in found}) == 2

        assert wait_for(both_holding, timeout=90, step=0.5)
        time.sleep(2)  # a few scrapes while running
        for gate in gates:
            gate.touch()
        for proc in launches:
            out, _ = proc.communicate(timeout=90)  # the endpoints stay up until Prometheus scraped the end
            assert proc.returncode == 0, out
            assert "--metrics-grace" in out

        # final states: scraped after the campaigns ended (the targets are gone now, so look back)
        final = query(prom_port, 'last_over_time(perfwatch_run_state{perfwatch_run_state="done"}[10m])')
        done = {(r["metric"]["logdir"], r["metric"]["run"]) for r in final if r["value"][1] == "1"}
        logdirs = {str((tmp_path / f"logdir{i}").resolve()) for i in range(2)}
        assert done == {(d, run) for d in logdirs for run in ("quick.r0", "hold.r0")}, final

        # every series Prometheus stored over the runs' whole lives
        series = api(prom_port, "series", **{"match[]": '{__name__=~"perfwatch_.+"}',
                                            "start": str(time.time() - 600), "end": str(time.time())})
        assert series
        identity: dict[tuple[str, ...], set[tuple[tuple[str, str], ...]]] = {}
        for labels in series:
            assert labels["job"] == "perfwatch" and labels["instance"] in {f"127.0.0.1:{p}" for p in ports}
            assert not any(k.startswith("exported_") for k in labels), labels  # no label collided with Prometheus's
            if "run" in labels:
                key = (labels["__name__"], labels["logdir"], labels["run"], labels.get("perfwatch_run_state", ""))
                identity.setdefault(key, set()).add(tuple(sorted(labels.items())))
                assert labels["campaign"] == "twin" and labels["hostname"]
        unstable = {k: v for k, v in identity.items() if len(v) > 1}
        assert not unstable, unstable  # one label set per metric and run, from queued to done
        assert {k[1] for k in identity} == logdirs  # two launches of one YAML: two sets of series
        info = query(prom_port, 'count by (logdir) (last_over_time(perfwatch_run_info{job="perfwatch"}[10m]))')
        assert sorted(r["value"][1] for r in info) == ["2", "2"]  # PromQL's {job="..."} means Prometheus's job
        states = {k[3] for k in identity if k[0] == "perfwatch_run_state"}
        assert {"queued", "running", "done", "crashed"} <= states  # every state listed, 0 or 1
    finally:
        for gate in gates:
            gate.touch()
        for proc in launches:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        prom.terminate()
        try:
            prom.wait(timeout=30)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        prom_log.close()


@pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian's prometheus package)")
def test_promtool_lints_the_exposition(tmp_path: Path) -> None:
    """promtool's metric lint passes but for the DCGM exporter's camelCase label names, kept on purpose."""
    from prometheus_client import generate_latest
    from test_metrics_endpoint import registry_for_exposition

    assert PROMTOOL is not None
    text = generate_latest(registry_for_exposition(tmp_path))
    out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=60)
    problems = (out.stdout + out.stderr).decode().splitlines()
    assert out.returncode in (0, 3), problems  # 3: lint problems only
    rest = [p for p in problems if "label names should be written in 'snake_case' not 'camelCase'" not in p]
    assert rest == [], rest
    camel = [p.split()[0] for p in problems if p not in rest]
    assert camel and all(name.startswith("perfwatch_gpu_") for name in camel)
