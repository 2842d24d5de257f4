"""The switches ``SGLANG_OVERLAY_DISABLE``, ``SGLANG_OVERLAY_STRICT`` and ``SGLANG_PLUGINS``. A
value not recognised fails safe (every patch off, or strict) with one WARNING, and
``problems()`` names it so that ``sglang-overlay status`` fails on it.
"""

import os

from sglang_overlay import PATCH_IDS
from sglang_overlay.observe import warn_once

DISABLE_ENV, STRICT_ENV = "SGLANG_OVERLAY_DISABLE", "SGLANG_OVERLAY_STRICT"
PLUGINS_ENV = "SGLANG_PLUGINS"
PLUGIN_NAME = "sglang_overlay"  # the entry point's name in group sglang.srt.plugins
OFF, ON = frozenset({"", "0", "false", "no", "off"}), frozenset({"1", "true", "yes", "on"})
DISABLE_FORMS = (
    "unset/0/false/no/off (all on), 1/true/yes/on/all (all off), or a comma list of patch ids "
    f"or their leading parts ({', '.join(PATCH_IDS)}; {', '.join(p[:4] for p in PATCH_IDS)})"
)


def _named(name: str) -> "list[str]":
    """The patch ids ``name`` stands for: the whole id or a leading part ending at a ``-``."""
    name = name.strip().lower()
    return [p for p in PATCH_IDS if name and (p == name or p.startswith(name + "-"))]


def disabled_patches(raw: "str | None") -> "tuple[frozenset, str | None]":
    """The patch ids a ``SGLANG_OVERLAY_DISABLE`` value turns off, and what in it is not
    recognised, with the forms accepted (then every patch is off: fail safe)."""
    value = (raw or "").strip().lower()
    if value in OFF or value in ON | {"all"}:
        return frozenset(() if value in OFF else PATCH_IDS), None
    named = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [n for n in named if len(_named(n)) != 1]
    if unknown or not named:  # only commas and spaces names nothing: not clearly "off"
        what = ", ".join(repr(u) for u in unknown) or "no patch id in it"
        why = f"not recognised ({what}); every patch is off (fail safe); accepted: {DISABLE_FORMS}"
        return frozenset(PATCH_IDS), f"{DISABLE_ENV}={raw!r} {why}"
    return frozenset(p for n in named for p in _named(n)), None


def strict_setting(raw: "str | None") -> "tuple[bool, str | None]":
    """Whether a ``SGLANG_OVERLAY_STRICT`` value means strict, and what is wrong with it."""
    value = (raw or "").strip().lower()
    if value in OFF or value in ON:
        return value in ON, None
    forms = "unset/0/false/no/off (warn) or 1/true/yes/on (raise)"
    return True, f"{STRICT_ENV}={raw!r} not recognised; treated as strict; accepted: {forms}"


def problems() -> "list[str]":
    """Each setting that the overlay does not recognise, with the forms it accepts."""
    disable = disabled_patches(os.environ.get(DISABLE_ENV))[1]
    strict = strict_setting(os.environ.get(STRICT_ENV))[1]
    return [problem for problem in (disable, strict) if problem]


def disabled_reason(patch_id: str) -> "str | None":
    """Why ``patch_id`` is turned off, or None when it is on."""
    plugins = os.environ.get(PLUGINS_ENV)
    # sglang's reading (load_plugins_by_group): unset or empty allows every plugin
    if plugins and PLUGIN_NAME not in {x.strip() for x in plugins.split(",")}:
        return (
            f"{PLUGINS_ENV}={plugins!r} does not name {PLUGIN_NAME}, so sglang skips the plugin "
            "and the start-up hook leaves the method alone too"
        )
    raw = os.environ.get(DISABLE_ENV)
    off, problem = disabled_patches(raw)
    if problem:
        warn_once(("disable", raw), "sglang-overlay: %s", problem)
        return f"{DISABLE_ENV}={raw!r} is not recognised, so every patch is off (fail safe)"
    if patch_id not in off:
        return None
    if raw.strip().lower() in ON | {"all"}:
        return f"{DISABLE_ENV}={raw.strip()} turns every patch off"
    return f"{DISABLE_ENV} lists {patch_id}"


def strict() -> bool:
    raw = os.environ.get(STRICT_ENV)
    on, problem = strict_setting(raw)
    if problem:
        warn_once(("strict", raw), "sglang-overlay: %s", problem)
    return on
