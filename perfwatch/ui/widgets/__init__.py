"""perfwatch's widgets: each draws what it is given and carries its own DEFAULT_CSS."""

from perfwatch.ui.widgets.detail import DetailPane, LogTail
from perfwatch.ui.widgets.devices import DevicePanel
from perfwatch.ui.widgets.plot import Plot
from perfwatch.ui.widgets.run_telemetry import RunTelemetry
from perfwatch.ui.widgets.runs_table import RunsTable

__all__ = ["DetailPane", "DevicePanel", "LogTail", "Plot", "RunTelemetry", "RunsTable"]
