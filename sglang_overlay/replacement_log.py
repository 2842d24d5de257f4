"""How a workspace's replacements reach the log without flooding it: INFO when one passes
the high-water mark, DEBUG for the others, at most one WARNING a minute while they thrash
(0.5.23 replaces on every dtype switch). Pure bookkeeping with an injectable clock; no torch.
"""

import logging
import threading
import time

from sglang_overlay.notices import logger

MIB = float(1 << 20)
THRASH_PER_MINUTE = 100
MINUTE = 60.0


class ReplacementLog:
    def __init__(
        self,
        clock=time.monotonic,
        thrash_per_minute: int = THRASH_PER_MINUTE,
        what: str = "DSV4 sparse-prefill workspace",
    ):
        self.what = what  # the workspace, as the log names it
        self._clock = clock
        self._thrash = thrash_per_minute
        self._lock = threading.Lock()
        self.high_water_bytes = 0
        self._window_start = None
        self._in_window = 0
        self._last_warning = None

    def replaced(self, old: str, new: str, new_bytes: int) -> None:
        """One replacement from ``old`` to ``new`` (descriptions), ``new_bytes`` large."""
        now = self._clock()
        with self._lock:
            if self._window_start is None or now - self._window_start >= MINUTE:
                self._window_start, self._in_window = now, 0
            self._in_window += 1
            passed = new_bytes > self.high_water_bytes
            if passed:
                self.high_water_bytes = new_bytes
            thrashing = self._in_window > self._thrash and (
                self._last_warning is None or now - self._last_warning >= MINUTE
            )
            if thrashing:
                self._last_warning = now
            count = self._in_window
        if passed:
            logger.info(
                "%s replaced (release-first): %s -> %s; high-water now %.1f MiB",
                self.what,
                old,
                new,
                new_bytes / MIB,
            )
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s replaced (release-first): %s -> %s", self.what, old, new)
        if thrashing:
            logger.warning(
                "sglang-overlay: %d %s replacements in the last minute (mixed dtypes or sizes "
                "replace the buffer each time); high-water %.1f MiB",
                count,
                self.what,
                self.high_water_bytes / MIB,
            )
