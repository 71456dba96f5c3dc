"""perfwatch's headless core: log ingest, run model, scores, process control. Never imports Textual.

Layer packages, low to high (a module imports only its own layer and lower ones; tests/test_layers.py
enforces it): `layout`/`keys` (the LOGDIR's file names, perfwatch's own log keys) < `ingest` <
`telemetry` < `mlperf` < `control` < `model` < `measure` < `results` < `engine`. Each package's
docstring says what it is for; code imports the module that defines a name, not the package.
"""
