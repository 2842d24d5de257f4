"""What the overlay tells operators: records on the ``sglang_overlay`` logger, once per cause.

Never ``warnings.warn``: under ``-W error`` it would raise inside the import it protects.
"""

import logging
import threading

logger = logging.getLogger("sglang_overlay")

_said: "set[tuple]" = set()
_lock = threading.Lock()


def warn_once(cause: tuple, message: str, *args) -> bool:
    """Log ``message`` as one WARNING unless ``cause`` was already reported; True if logged."""
    with _lock:
        if cause in _said:
            return False
        _said.add(cause)
    logger.warning(message, *args)
    return True
