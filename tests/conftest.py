"""Shared fixtures: paths to the bundled real MLPerf logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
MLPERF_LOGS = DATA / "mlperf-logs"


@pytest.fixture(autouse=True, scope="session")
def _own_user_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """perfwatch's user cache (the stored CPU peak, RCP verdicts) in a folder of this test session:
    tests never read the developer's measured peak nor leave verdicts in ~/.cache."""
    import os

    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))


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
    from launch_helpers import kill_groups, run_pgids

    made: list = []
    try:
        yield made
    finally:
        for s in made:
            kill_groups(run_pgids(s))
            s.close(stop_runs=False)


def _slurm_cluster(nodes: int, accounting: bool = False):  # type: ignore[no-untyped-def]
    """Start a local Slurm (tests/slurm_cluster.py) or skip saying why; stopped after, even if pytest is killed."""
    import os
    import shutil
    import tempfile

    from slurm_cluster import SlurmCluster, accounting_unavailable, unavailable

    why = accounting_unavailable() if accounting else unavailable()
    if why:
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="perfwatch-slurm-", dir="/tmp"))
    cluster = SlurmCluster(root, nodes, accounting=accounting)
    reaper = cluster.reap_after(os.getpid())  # a killed session's daemons do not outlive it
    try:
        cluster.start()
    except (RuntimeError, OSError) as exc:
        cluster.stop()
        pytest.skip(f"local Slurm did not come up: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        reaper.kill()
        reaper.wait()


@pytest.fixture(scope="session")
def slurm():  # type: ignore[no-untyped-def]
    """A real single-node Slurm for this test session; skips where it cannot.

    `SLURM_CONF` is exported for the session so sbatch/squeue (and perfwatch's subprocesses) find it.
    """
    import os

    for cluster in _slurm_cluster(1):
        saved = {k: os.environ.get(k) for k in cluster.env()}
        os.environ.update(cluster.env())
        try:
            yield cluster
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture(scope="module")
def slurm_two_nodes():  # type: ignore[no-untyped-def]
    """A second local Slurm with two compute nodes (n1, n2) on this host; use `cluster.env()` to reach it."""
    yield from _slurm_cluster(2)


@pytest.fixture
def slurm_private():  # type: ignore[no-untyped-def]
    """A local Slurm of this test's own (~3 s), for tests that take its node down; `cluster.env()` reaches it."""
    yield from _slurm_cluster(1)


@pytest.fixture(scope="module")
def slurm_accounting():  # type: ignore[no-untyped-def]
    """A local Slurm of its own with accounting on (slurmdbd on a throw-away MariaDB): `sacct` answers.
    Use `cluster.env()` to reach it; skips where slurmdbd or MariaDB is not installed."""
    yield from _slurm_cluster(1, accounting=True)
