"""New sglang releases, judged with the other packages: the overlay's state, whether the
series applies, the A/B (``make compat``, ``python -m ci watch``)."""
