"""Process control: campaign YAML to a plan, then real processes started, signalled and reaped.

Why a layer: runs must outlive perfwatch and be controllable from any front end. `campaign`
validates YAML (`file:line: field: message`), `scheduler` owns a LOGDIR's runs and `backends/` run
them (local: process groups, pause = SIGSTOP to the group; Slurm jobs), `process` starts each run under
the `supervisor`, `registry` is `perfwatch.json`, `states` the `RunState`s, `controller` the
`Controller` protocol and requests of a detached `attach`.
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
    "RunState": "states",
    "Registry": "registry",
    "RunRecord": "registry",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
