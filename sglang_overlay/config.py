"""Environment switches read by the overlay, validated; nothing here patches or imports sglang.

Accepted forms (case and surrounding spaces ignored):

- ``SGLANG_OVERLAY_DISABLE``: unset, empty, ``0``, ``false``, ``no``, ``off``: every patch on.
  ``1``, ``true``, ``yes``, ``on``, ``all``: every patch off. A comma list of patch ids
  (``0001-dsv4-sparse-prefill-release-first``): those patches off.
- ``SGLANG_OVERLAY_STRICT``: unset, empty, ``0``, ``false``, ``no``, ``off``: an unknown shape is
  left untouched with one WARNING. ``1``, ``true``, ``yes``, ``on``: it raises
  ``UnsupportedShapeError`` on every import attempt.

Anything else (a ``DISABLE`` of only commas and spaces included) fails safe, with one WARNING
naming the value and these forms: the user asked to turn something off (or on), so an
unrecognised ``DISABLE`` value or patch id turns every patch off, and an unrecognised
``STRICT`` value means strict.
"""

import os

from sglang_overlay import PATCH_ID
from sglang_overlay.notices import warn_once

DISABLE_ENV = "SGLANG_OVERLAY_DISABLE"
STRICT_ENV = "SGLANG_OVERLAY_STRICT"
PATCH_IDS = (PATCH_ID,)

OFF = frozenset({"", "0", "false", "no", "off"})
ON = frozenset({"1", "true", "yes", "on"})
ALL = ON | {"all"}

DISABLE_FORMS = (
    f"unset/0/false/no/off (all on), 1/true/yes/on/all (all off), "
    f"or a comma list of patch ids ({', '.join(PATCH_IDS)})"
)
STRICT_FORMS = "unset/0/false/no/off (warn) or 1/true/yes/on (raise)"


def disabled_reason(patch_id: str) -> "str | None":
    """Why ``patch_id`` is turned off, or None when it is on."""
    raw = os.environ.get(DISABLE_ENV)
    if raw is None or raw.strip().lower() in OFF:
        return None
    if raw.strip().lower() in ALL:
        return f"{DISABLE_ENV}={raw.strip()} turns every patch off"
    named = [part.strip() for part in raw.split(",") if part.strip()]
    known = {p.lower(): p for p in PATCH_IDS}
    unknown = [n for n in named if n.lower() not in known]
    if unknown or not named:  # only commas and spaces names nothing: not clearly "off"
        warn_once(
            ("disable", raw),
            "sglang-overlay: %s=%r not recognised (%s); accepted: %s. Every patch is off.",
            DISABLE_ENV,
            raw,
            ", ".join(repr(u) for u in unknown) or "no patch id in it",
            DISABLE_FORMS,
        )
        return f"{DISABLE_ENV}={raw!r} is not recognised, so every patch is off (fail safe)"
    if patch_id.lower() in {n.lower() for n in named}:
        return f"{DISABLE_ENV} lists {patch_id}"
    return None


def strict() -> bool:
    raw = os.environ.get(STRICT_ENV)
    if raw is None or raw.strip().lower() in OFF:
        return False
    if raw.strip().lower() not in ON:
        warn_once(
            ("strict", raw),
            "sglang-overlay: %s=%r not recognised; accepted: %s. Treated as strict.",
            STRICT_ENV,
            raw,
            STRICT_FORMS,
        )
    return True
