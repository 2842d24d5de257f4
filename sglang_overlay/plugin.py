"""The entry point sglang's plugin loader calls (group ``sglang.srt.plugins``, README.md, "Using
the overlay"): the second activation path, above both the start-up hook and the activation.
"""

import sys

from sglang_overlay import WORKSPACE_MODULE, activation, import_hook


def activate() -> None:
    """Entry point for sglang's plugin loader."""
    import_hook.install()
    module = sys.modules.get(WORKSPACE_MODULE)
    if module is not None:
        activation.on_workspace_import(module, via="sglang plugin loader")
        return
    try:  # an sglang process that has not imported the module (yet): it says so too
        from sglang_overlay import overlay

        overlay.publish()
    except Exception:
        pass
