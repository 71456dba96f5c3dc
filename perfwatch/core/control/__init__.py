"""Process control: campaign YAML to a plan, then real processes started, signalled and reaped.

Why a layer: runs must outlive perfwatch and be controllable from any front end. `campaign`
validates YAML (`file:line: field: message`), `scheduler` owns a LOGDIR's runs and `backends/` run
them (local: process groups, pause = SIGSTOP to the group; Slurm jobs), `process` starts each run under
the `supervisor`, `registry` is `perfwatch.json`, `states` the `RunState`s, `controller` the
`Controller` protocol and requests of a detached `attach`.
"""
