"""Text front ends: `--headless` progress and tables, terminal-safe text output (no Textual here)."""
