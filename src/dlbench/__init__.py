"""dlbench: deep-learning benchmarks for GPU clusters."""

__version__ = "0.1.0"
