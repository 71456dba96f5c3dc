"""Ingest: bytes on disk to mllog events, fast and never blocking a front end.

Why a layer: every reader (the live view, `report`, `check`, `attach`) gets records the same way:
`discover` finds the logs of a tree, `FileTail` reads what a file appended (rotation, truncation,
partial lines), `LogWatcher` follows a tree with inotify or polling, `LineParser` turns
`:::MLLOG` lines into `Event`s. Knows nothing about runs: that is the model's job.
"""
