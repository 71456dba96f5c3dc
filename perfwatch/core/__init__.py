"""Headless core: log ingest, run model, scores, process control. Never imports Textual."""
