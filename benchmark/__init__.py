"""Benchmarks: every figure is a ratio or difference measured side by side in one run."""
