"""The overlay's state as Prometheus gauges on sglang's own metrics endpoint (README.md,
"Dashboards"), set when the state or the high-water mark changes; never raises.

prometheus_client picks single or multiprocess mode from ``PROMETHEUS_MULTIPROC_DIR`` when it
is first imported, and sglang sets that variable before importing it: so the overlay imports
it only where the host already has, or the variable is set, never first. In multiprocess mode
the gauges' files end with the process: it marks itself dead at exit (``mark_process_dead``),
so ``/metrics`` never goes on exporting a process that is gone.
"""

import atexit
import os
import sys

STATE_GAUGE = "sglang_overlay_patch_state"
HIGH_WATER_GAUGE = "sglang_overlay_workspace_high_water_bytes"

_gauges = None  # registered once per process


def update(fields: dict, states) -> None:
    """Set this process's gauges from its published ``fields``, where there are gauges."""
    global _gauges
    if _gauges is None:
        multiprocess = multiprocess_dir()
        if "prometheus_client" not in sys.modules and not multiprocess:
            return
        try:
            from prometheus_client import Gauge
        except ImportError:
            return
        _gauges = (
            Gauge(
                STATE_GAUGE,
                "sglang-overlay patch state in this process (1 = the state it is in)",
                ["patch", "state", "overlay_version"],
                multiprocess_mode="liveall",
            ),
            Gauge(
                HIGH_WATER_GAUGE,
                "Largest workspace the patch's method allocated in this process, bytes",
                ["patch"],
                multiprocess_mode="liveall",
            ),
        )
        if multiprocess:
            atexit.register(_mark_dead, multiprocess)
    state_gauge, high_water_gauge = _gauges
    for record in fields["patches"]:
        for state in states:
            state_gauge.labels(record["patch"], state, fields["overlay_version"]).set(
                1 if state == record["state"] else 0
            )
        high_water_gauge.labels(record["patch"]).set(
            record.get("high_water_bytes", fields["high_water_bytes"])
        )


def multiprocess_dir() -> "str | None":
    """prometheus_client's multiprocess directory, as it reads it."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir")


def _mark_dead(directory: str) -> None:
    """At exit: remove this process's live gauges (ours and any other) from ``directory``."""
    from prometheus_client import multiprocess

    try:
        multiprocess.mark_process_dead(os.getpid(), directory)
    except OSError as exc:  # another process removed the files, or the folder went away
        from sglang_overlay.notices import logger

        logger.warning("sglang-overlay: gauges of this process left in %s: %s", directory, exc)
