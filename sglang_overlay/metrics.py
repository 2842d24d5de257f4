"""The overlay's state as Prometheus gauges, on the endpoint sglang's own metrics use.

Two gauges per process: ``sglang_overlay_patch_state{patch, state, overlay_version}`` (1 for
the state the patch is in, 0 for the others) and
``sglang_overlay_workspace_high_water_bytes{patch}`` (the largest workspace buffer the
process allocated). In prometheus_client's multiprocess mode, which sglang uses when metrics
are on, each process writes its own values and the exporter labels them with ``pid``
(``multiprocess_mode="liveall"``). Set when the state changes or the high-water mark moves,
never on the reuse path.

prometheus_client decides between one process and multiprocess mode when it is first imported,
from ``PROMETHEUS_MULTIPROC_DIR``; sglang sets that variable, then imports it. So the overlay
imports it only where the host already has (or where the variable is already set): importing
it earlier would fix the wrong mode for sglang's own metrics. Not for: anything without
prometheus_client; never raises.
"""

import os
import sys

STATE_GAUGE = "sglang_overlay_patch_state"
HIGH_WATER_GAUGE = "sglang_overlay_workspace_high_water_bytes"

_gauges = globals().get("_gauges")  # registered once per process, across reloads


def update(fields: dict, states) -> bool:
    """Set this process's gauges from its published ``fields``; whether there were gauges."""
    gauges = _registered()
    if gauges is None:
        return False
    state_gauge, high_water_gauge = gauges
    for record in fields["patches"]:
        for state in states:
            state_gauge.labels(record["patch"], state, fields["overlay_version"]).set(
                1 if state == record["state"] else 0
            )
        high_water_gauge.labels(record["patch"]).set(fields["high_water_bytes"])
    return True


def _registered():
    global _gauges
    if _gauges is not None:
        return _gauges
    multiprocess = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get(
        "prometheus_multiproc_dir"
    )
    if "prometheus_client" not in sys.modules and not multiprocess:
        return None
    try:
        from prometheus_client import Gauge
    except ImportError:
        return None
    _gauges = (
        Gauge(
            STATE_GAUGE,
            "sglang-overlay patch state in this process (1 = the state it is in)",
            ["patch", "state", "overlay_version"],
            multiprocess_mode="liveall",
        ),
        Gauge(
            HIGH_WATER_GAUGE,
            "Largest DSV4 sparse-prefill workspace buffer this process allocated, bytes",
            ["patch"],
            multiprocess_mode="liveall",
        ),
    )
    return _gauges
