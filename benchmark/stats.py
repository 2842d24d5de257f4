"""Summaries of interleaved measurements: median with min and max, nothing else."""

import statistics


def summary(values) -> dict:
    values = list(values)
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }
