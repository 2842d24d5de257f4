"""The start-up hook: a meta-path finder that patches each patched module right after it runs.

``sglang_overlay.pth`` calls ``install()`` in every interpreter. importlib holds its global
lock while ``find_spec`` runs, so ``find_spec`` imports nothing and never touches
``sys.meta_path``; it only wraps the real loader, and all the work happens in ``exec_module``,
after the lock is released. This module imports only ``sys`` and ``_thread``.
"""

import _thread
import sys

from sglang_overlay import PATCHED_MODULES

# The patched modules, patched right after they run, and sglang itself: a process that imported
# sglang records that it has the overlay, whether or not it ever imports a patched module.
WATCHED = frozenset({"sglang", *(n for names in PATCHED_MODULES.values() for n in names)})


class WorkspaceImportHook:
    """Meta-path finder for the patched modules; never finds anything itself."""

    def __init__(self):
        # Thread idents inside find_spec: another finder that calls importlib.util.find_spec
        # from its own find_spec must not recurse into us.
        self._searching = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in WATCHED:
            return None
        me = _thread.get_ident()
        if me in self._searching:
            return None
        try:  # the add inside: a KeyboardInterrupt right after it must not leave us marked
            self._searching.add(me)
            spec = self._spec_from_later_finders(fullname, path, target)
        finally:
            self._searching.discard(me)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec  # a legacy loader: the plugin path or apply() still covers it
        spec.loader = ActivatingLoader(spec.loader)
        return spec

    def _spec_from_later_finders(self, fullname, path, target):
        # A snapshot: importlib may be iterating the live list in this or another thread.
        finders = list(sys.meta_path)
        start = finders.index(self) + 1 if self in finders else 0
        for finder in finders[start:]:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None


class ActivatingLoader:
    """The module's own loader, then activation; otherwise indistinguishable from it."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_source, is_package, get_resource_reader, ...
        if name == "loader":  # not set yet (copy.deepcopy, unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.loader, name)

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        # Put the real loader back first: the module must look as if we were never here.
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        self.loader.exec_module(module)
        # Outside importlib's global lock: importing here is as safe as the module's own imports.
        from sglang_overlay import activation

        activation.on_import(module, via="start-up hook")


HOOK = WorkspaceImportHook()


def installed() -> bool:
    return HOOK in sys.meta_path


def install() -> None:
    """Put the finder first on ``sys.meta_path`` once. Never called from a finder: an insert
    at the front can make a concurrent import ask one finder twice, but never skip one."""
    if not installed():
        sys.meta_path.insert(0, HOOK)
