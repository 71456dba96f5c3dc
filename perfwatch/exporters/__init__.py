"""Exporters: present a live session to other tools (Prometheus/OpenMetrics scrapes, static HTML).

A front-end layer like `text/` and `ui/`: it reads core snapshots and never feeds anything back.
"""
