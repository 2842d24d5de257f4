"""Keep the process's record true when another plugin hooks the patched method through sglang's
``HookRegistry`` (README.md, "Control and visibility"): its ``apply_hooks`` is where a REPLACE or
AROUND lands on the class, so the overlay has it publish once it returns. Nothing here imports
sglang: only a registry that sglang itself loaded is followed.
"""

import functools
import sys

REGISTRY_MODULE = "sglang.srt.plugins.hook_registry"
MARK = "__sglang_overlay_publishes__"


def follow(then) -> bool:
    """Make ``HookRegistry.apply_hooks`` call ``then()`` after it ran (once per process, also
    when it raised); whether the registry is followed now."""
    registry = getattr(sys.modules.get(REGISTRY_MODULE), "HookRegistry", None)
    if not isinstance(registry, type):
        return False
    current = vars(registry).get("apply_hooks")
    if not isinstance(current, classmethod):
        return False
    apply_hooks = current.__func__
    if getattr(apply_hooks, MARK, False):
        return True

    @functools.wraps(apply_hooks)
    def then_publish(cls, *args, **kwargs):
        try:
            return apply_hooks(cls, *args, **kwargs)
        finally:
            then()

    setattr(then_publish, MARK, True)
    registry.apply_hooks = classmethod(then_publish)
    return True
