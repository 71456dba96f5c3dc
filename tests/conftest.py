"""Shared fixtures: paths to the bundled real MLPerf logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
MLPERF_LOGS = DATA / "mlperf-logs"


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
