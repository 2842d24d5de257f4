"""Keep the process's record true when another plugin hooks a patched method through sglang's
``HookRegistry`` (README.md, "Control and visibility"): its ``apply_hooks`` is where a REPLACE or
AROUND lands on the class, so the overlay has it publish once it returns; ``foreign_hook`` says
whether such a hook calls the overlay's method or only names it. Nothing here imports sglang:
only a registry that sglang itself loaded is followed.
"""

import functools
import sys

REGISTRY_MODULE = "sglang.srt.plugins.hook_registry"
MARK = "__sglang_overlay_publishes__"


def follow(then) -> bool:
    """Make ``HookRegistry.apply_hooks`` call ``then()`` after it ran (once per process, also
    when it raised); whether the registry is followed now. Without it, a process whose method
    another plugin REPLACEd keeps a record saying ``applied``: ``status --processes`` (which
    reads only the records) would call a process that runs unmodified sglang fixed."""
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


def foreign_hook(live, ours) -> "tuple[str, str] | None":
    """``("wrapped" | "replaced", reason)`` when ``live`` is another hook's function whose
    ``__wrapped__`` chain leads to ``ours``: wrapped when each link holds the next in its
    closure (it can call it: sglang's AROUND, BEFORE, AFTER), replaced when one does not
    (sglang's REPLACE only names the original)."""
    calls, outer = True, live
    for _ in range(100):  # a chain, not a cycle
        inner = getattr(outer, "__wrapped__", None)
        if inner is None or outer is ours:
            return None
        calls = calls and any(_cell(c) is inner for c in getattr(outer, "__closure__", None) or ())
        if inner is ours:
            code = getattr(live, "__code__", None)
            where = (
                f"{code.co_name} in {code.co_filename}:{code.co_firstlineno}"
                if code
                else repr(live)
            )
            if calls:
                return "wrapped", (
                    f"another hook's function ({where}) wraps the overlay's release-first "
                    "method and can call it: release-first runs where that hook calls through"
                )
            return "replaced", (
                f"another hook's function ({where}) names the overlay's release-first method "
                "as __wrapped__ but does not hold it: that hook runs instead, release-first does not"
            )
        outer = inner
    return None


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None
