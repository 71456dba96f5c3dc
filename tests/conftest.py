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
