"""What the overlay tells operators: records on the ``sglang_overlay`` logger, once per cause.

Never ``warnings.warn``: under ``-W error`` it would raise inside the import it protects.
"""

import logging
import threading

logger = logging.getLogger("sglang_overlay")

# Kept across importlib.reload() of this module: once per process means once per process.
_said: "set[tuple]" = globals().get("_said", set())
_lock = globals().get("_lock") or threading.Lock()


def warn_once(cause: tuple, message: str, *args) -> bool:
    """Log ``message`` as one WARNING unless ``cause`` was already reported; True if logged."""
    with _lock:
        if cause in _said:
            return False
        _said.add(cause)
    logger.warning(message, *args)
    return True
