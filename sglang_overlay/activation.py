"""The two activation paths, funnelled into one idempotent ``activate()``.

sglang's general-plugin loader calls ``activate`` (entry point group ``sglang.srt.plugins``) in
the processes sglang starts; the start-up trigger calls it in every other process on the first
``import sglang``. Whichever comes first registers a wrapt post-import hook on the workspace
module; the second call is a no-op. wrapt runs the hook at once if the module is already
imported, else right after it is.
"""

from sglang_overlay.shapes import WORKSPACE_MODULE

_activated = False


def activate() -> None:
    global _activated
    if _activated:
        return
    _activated = True
    from wrapt import register_post_import_hook

    register_post_import_hook(_on_workspace_module_import, WORKSPACE_MODULE)


def _on_workspace_module_import(module) -> None:
    from sglang_overlay import overlay

    overlay.apply_to_module(module)
