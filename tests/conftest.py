"""Shared fixtures: paths to the bundled real MLPerf logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
MLPERF_LOGS = DATA / "mlperf-logs"


@pytest.fixture(autouse=True)
def _no_gpu_unless_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU machine the suite behaves as on CI: a test sees no GPU unless it is marked `gpu`.

    perfwatch hands out only the GPUs its own CUDA_VISIBLE_DEVICES leaves visible, and the
    workloads' `--device auto` follows the same variable, so emptying it keeps every CPU test
    (concurrency, timings, numbers compared with a CPU run) on the CPU, in this process and in
    the processes it starts. Tests marked `gpu` see the machine's GPUs.
    """
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture(scope="session")
def mlperf_logs() -> Path:
    return MLPERF_LOGS


@pytest.fixture(scope="session")
def official_scores() -> dict:
    return json.loads((MLPERF_LOGS / "official_scores.json").read_text())


@pytest.fixture
def owned():  # type: ignore[no-untyped-def]
    """Schedulers made by a test; every process group they started is SIGKILLed afterwards."""
    from test_launch_helpers import kill_groups, run_pgids

    made: list = []
    try:
        yield made
    finally:
        for s in made:
            kill_groups(run_pgids(s))
            s.close(stop_runs=False)


@pytest.fixture(scope="session")
def slurm():  # type: ignore[no-untyped-def]
    """A real single-node Slurm for this test session (tests/slurm_cluster.py); skips where it cannot.

    `SLURM_CONF` is exported for the session so sbatch/squeue (and perfwatch's subprocesses) find it.
    """
    import os
    import shutil
    import tempfile

    from slurm_cluster import SlurmCluster, unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="perfwatch-slurm-", dir="/tmp"))
    cluster = SlurmCluster(root)
    saved = {k: os.environ.get(k) for k in cluster.env()}
    try:
        cluster.start()
    except (RuntimeError, OSError) as exc:
        cluster.stop()
        pytest.skip(f"local Slurm did not come up: {exc}")
    os.environ.update(cluster.env())
    try:
        yield cluster
    finally:
        cluster.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)
