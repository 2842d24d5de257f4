"""Environment switches read by the overlay; nothing here patches or imports sglang.

``SGLANG_OVERLAY_DISABLE``: ``1``/``true``/``all`` turns every patch off; otherwise a comma list
of patch ids turns off just those. ``SGLANG_OVERLAY_STRICT=1`` turns "leave an unknown shape
untouched and warn" into an exception.
"""

import os

DISABLE_ENV = "SGLANG_OVERLAY_DISABLE"
STRICT_ENV = "SGLANG_OVERLAY_STRICT"
_ALL = {"1", "true", "yes", "on", "all"}
_NONE = {"", "0", "false", "no", "off"}


def disabled_reason(patch_id: str) -> "str | None":
    """Why ``patch_id`` is turned off, or None when it is on."""
    raw = os.environ.get(DISABLE_ENV, "").strip()
    if raw.lower() in _NONE:
        return None
    if raw.lower() in _ALL:
        return f"{DISABLE_ENV}={raw} turns every patch off"
    ids = {part.strip() for part in raw.split(",") if part.strip()}
    if patch_id in ids:
        return f"{DISABLE_ENV} lists {patch_id}"
    return None


def strict() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() in _ALL
