"""Subcommands: one module each, each exposing `register(subparsers)` that sets `func`."""
