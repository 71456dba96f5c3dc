"""Process control: campaign YAML to a plan, then real processes started, signalled and reaped.

Why a layer: runs must outlive perfwatch and be controllable from any front end. `campaign`
validates YAML (`file:line: field: message`), `scheduler` owns a LOGDIR's runs (pause is its
SIGSTOP to the run's process group), `process` starts each run under the `supervisor`, `registry`
is `perfwatch.json`, `controller` the `Controller` protocol, `RunState` and requests of a detached
`attach`.
"""

from perfwatch.core import lazy_exports

_EXPORTS = {
    "Campaign": "campaign",
    "CampaignError": "campaign",
    "RunSpec": "campaign",
    "load_campaign": "campaign",
    "Scheduler": "scheduler",
    "ClientController": "controller",
    "Controller": "controller",
    "ProcInfo": "controller",
    "RunState": "controller",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
