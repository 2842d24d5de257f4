"""Benchmarks: every figure is a ratio or difference measured side by side in one run."""

import statistics


def summary(values) -> dict:
    """Median, min and max of interleaved measurements: nothing else."""
    values = list(values)
    return dict(median=statistics.median(values), min=min(values), max=max(values), n=len(values))
