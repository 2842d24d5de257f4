"""The entry point sglang's plugin loader calls (group ``sglang.srt.plugins``, README.md, "Using
the overlay"): the second activation path, above both the start-up hook and the activation.
"""

import sys

from sglang_overlay import PATCHED_MODULES, activation, import_hook


def activate() -> None:
    """Entry point for sglang's plugin loader."""
    import_hook.install()
    names = dict.fromkeys(n for modules in PATCHED_MODULES.values() for n in modules)
    loaded = [sys.modules.get(n) for n in names]
    for module in [m for m in loaded if m is not None]:
        activation.on_workspace_import(module, via="sglang plugin loader")
    if any(m is not None for m in loaded):
        return
    # An sglang process that has not imported a patched module (yet): it says so too.
    from sglang_overlay import overlay

    overlay.publish()
