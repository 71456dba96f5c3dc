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
