"""Tools that keep the upstream patch series in ``patches/`` healthy.

``python -m series`` is the one entry point (materialize, check, apply, refresh, matrix).
The modules here talk to git and pip only at their thin edges (``gitcmd``, ``wheels``); the
parsing, path mapping and rendering they rely on are pure functions. Nothing here imports sglang
or the runtime overlay: the series and the overlay are two routes to the same fix.
"""
