"""New sglang releases judged: the overlay's state, whether the series applies, the A/B."""
