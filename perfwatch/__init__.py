"""perfwatch: watch, control and score deep-learning training benchmarks from one terminal app."""

__version__ = "0.1.0"
