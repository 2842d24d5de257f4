"""Environment switches read by the overlay, validated; nothing here patches or imports sglang.

Accepted forms (case and surrounding spaces ignored):

- ``SGLANG_OVERLAY_DISABLE``: unset, empty, ``0``, ``false``, ``no``, ``off``: every patch on.
  ``1``, ``true``, ``yes``, ``on``, ``all``: every patch off. A comma list of patch ids: those
  patches off. An id may be shortened to any part of it that ends at a ``-``
  (``0001``, ``0001-dsv4``) as long as it names exactly one patch.
- ``SGLANG_OVERLAY_STRICT``: unset, empty, ``0``, ``false``, ``no``, ``off``: an unknown shape is
  left untouched with one WARNING. ``1``, ``true``, ``yes``, ``on``: it raises
  ``UnsupportedShapeError`` on every import attempt.
- ``SGLANG_PLUGINS`` (sglang's own allow-list of general plugins, parsed as sglang parses it):
  when it is set and does not name ``sglang_overlay``, every patch is off in both activation
  paths, as sglang's loader skips the plugin.

Anything else (a ``DISABLE`` of only commas and spaces included) fails safe, with one WARNING
naming the value and these forms: the user asked to turn something off (or on), so an
unrecognised ``DISABLE`` value or patch id turns every patch off, and an unrecognised
``STRICT`` value means strict. ``problems()`` names such values, so that ``sglang-overlay
status`` can fail on them instead of passing a health check.
"""

import os

from sglang_overlay import PATCH_ID
from sglang_overlay.notices import warn_once

DISABLE_ENV = "SGLANG_OVERLAY_DISABLE"
STRICT_ENV = "SGLANG_OVERLAY_STRICT"
PLUGINS_ENV = "SGLANG_PLUGINS"
PLUGIN_NAME = "sglang_overlay"  # the entry point's name in group sglang.srt.plugins
PATCH_IDS = (PATCH_ID,)

OFF = frozenset({"", "0", "false", "no", "off"})
ON = frozenset({"1", "true", "yes", "on"})
ALL = ON | {"all"}

DISABLE_FORMS = (
    f"unset/0/false/no/off (all on), 1/true/yes/on/all (all off), "
    f"or a comma list of patch ids or their leading parts ({', '.join(PATCH_IDS)}, 0001)"
)
STRICT_FORMS = "unset/0/false/no/off (warn) or 1/true/yes/on (raise)"


def patch_ids_named(name: str) -> "list[str]":
    """The patch ids ``name`` stands for: the whole id or a leading part ending at a ``-``."""
    name = name.strip().lower()
    return [
        p for p in PATCH_IDS if name and (p.lower() == name or p.lower().startswith(name + "-"))
    ]


def disabled_patches(raw: "str | None") -> "tuple[frozenset, str | None]":
    """The patch ids a ``SGLANG_OVERLAY_DISABLE`` value turns off, and, when part of it is not
    recognised, what (then every patch is off: fail safe)."""
    if raw is None or raw.strip().lower() in OFF:
        return frozenset(), None
    if raw.strip().lower() in ALL:
        return frozenset(PATCH_IDS), None
    named = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [n for n in named if len(patch_ids_named(n)) != 1]
    if unknown or not named:  # only commas and spaces names nothing: not clearly "off"
        what = ", ".join(repr(u) for u in unknown) or "no patch id in it"
        return frozenset(PATCH_IDS), f"{DISABLE_ENV}={raw!r} not recognised ({what})"
    return frozenset(p for n in named for p in patch_ids_named(n)), None


def strict_setting(raw: "str | None") -> "tuple[bool, str | None]":
    """Whether a ``SGLANG_OVERLAY_STRICT`` value means strict, and what is wrong with it."""
    if raw is None or raw.strip().lower() in OFF:
        return False, None
    if raw.strip().lower() in ON:
        return True, None
    return True, f"{STRICT_ENV}={raw!r} not recognised"


def plugin_allowed(raw: "str | None") -> bool:
    """sglang's reading of ``SGLANG_PLUGINS`` (``load_plugins_by_group``): unset or empty
    allows every plugin; otherwise only the comma-separated names, spaces stripped."""
    if not raw:
        return True
    return PLUGIN_NAME in {x.strip() for x in raw.split(",") if x.strip()}


def problems(environ=None) -> "list[str]":
    """Each setting that the overlay does not recognise, with the forms it accepts."""
    environ = os.environ if environ is None else environ
    found = []
    _, disable = disabled_patches(environ.get(DISABLE_ENV))
    if disable:
        found.append(f"{disable}; every patch is off (fail safe); accepted: {DISABLE_FORMS}")
    _, strict_problem = strict_setting(environ.get(STRICT_ENV))
    if strict_problem:
        found.append(f"{strict_problem}; treated as strict; accepted: {STRICT_FORMS}")
    return found


def disabled_reason(patch_id: str) -> "str | None":
    """Why ``patch_id`` is turned off, or None when it is on."""
    plugins = os.environ.get(PLUGINS_ENV)
    if not plugin_allowed(plugins):
        return (
            f"{PLUGINS_ENV}={plugins!r} does not name {PLUGIN_NAME}, so sglang skips the plugin "
            "and the start-up hook leaves the method alone too"
        )
    raw = os.environ.get(DISABLE_ENV)
    off, problem = disabled_patches(raw)
    if problem:
        warn_once(
            ("disable", raw),
            "sglang-overlay: %s; accepted: %s. Every patch is off.",
            problem,
            DISABLE_FORMS,
        )
        return f"{DISABLE_ENV}={raw!r} is not recognised, so every patch is off (fail safe)"
    if patch_id not in off:
        return None
    if raw.strip().lower() in ALL:
        return f"{DISABLE_ENV}={raw.strip()} turns every patch off"
    return f"{DISABLE_ENV} lists {patch_id}"


def strict() -> bool:
    raw = os.environ.get(STRICT_ENV)
    on, problem = strict_setting(raw)
    if problem:
        warn_once(
            ("strict", raw),
            "sglang-overlay: %s; accepted: %s. Treated as strict.",
            problem,
            STRICT_FORMS,
        )
    return on
