"""New sglang releases, judged with the other packages: the overlay's state, whether the
series applies, the A/B (``python -m tools.releases watch``; ``make compat`` checks the releases
the README's table lists)."""
