"""Two paths to ``on_import`` in every sglang process: the start-up hook (the .pth calls
``install()``: a meta-path finder wrapping the loader of sglang and each patched module) and
sglang's plugin loader (``activate``). ``find_spec`` runs under importlib's lock: it imports
nothing, and this module only ``sys`` and ``_thread`` at start-up.
"""

import _thread
import sys

from sglang_overlay import PATCHED_MODULES

PATCHED = tuple(dict.fromkeys(n for names in PATCHED_MODULES.values() for n in names))
WATCHED = frozenset({"sglang", *PATCHED})  # a process that imported sglang says it has us


class WorkspaceImportHook:
    """Meta-path finder for the watched modules; never finds anything itself."""

    def __init__(self):
        self._searching = set()  # threads inside: a finder calling find_spec must not recurse

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in WATCHED:  # every import of the process asks: this test only
            return None
        me = _thread.get_ident()
        if me in self._searching:
            return None
        try:  # the add inside: a KeyboardInterrupt right after it must not leave us marked
            self._searching.add(me)
            finders = list(sys.meta_path)  # a snapshot: another thread may be iterating it
            after = finders[finders.index(self) + 1 :] if self in finders else finders
            found = (f.find_spec(fullname, path, target) for f in after if hasattr(f, "find_spec"))
            spec = next((s for s in found if s is not None), None)
        finally:
            self._searching.discard(me)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = ActivatingLoader(spec.loader)
        return spec


class ActivatingLoader:
    """The module's own loader, then activation; otherwise indistinguishable from it."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_source, is_package, get_resource_reader, ...
        if name == "loader":  # not set yet (copy.deepcopy, unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.loader, name)

    def exec_module(self, module):
        # Put the real loader back first: the module must look as if we were never here.
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        if module.__spec__.loader is self:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        on_import(module, via="start-up hook")


HOOK = WorkspaceImportHook()


def install() -> None:
    if HOOK not in sys.meta_path:
        sys.meta_path.insert(0, HOOK)


def activate() -> None:
    install()
    for module in [sys.modules[n] for n in PATCHED if n in sys.modules]:
        on_import(module, via="sglang plugin loader")
    from sglang_overlay import overlay

    overlay.publish()  # also where no patched module is imported (yet)


def on_import(module, via: str) -> None:
    """Apply each of ``module``'s patches (sglang: publish); never raises unless strict."""
    from sglang_overlay import config, overlay

    patch_ids = [p for p, names in PATCHED_MODULES.items() if module.__name__ in names]
    if not patch_ids:
        overlay.publish()
    for patch_id in patch_ids:
        try:
            overlay.apply_to_module(module, patch_id)
        except Exception as exc:  # inside the user's import: recorded and said once
            if config.strict():
                raise  # the user asked for an exception, on every attempt
            overlay.record_failure(patch_id, module.__name__, via, exc)
