"""How the overlay reaches every sglang process, by two paths that end in ``on_import``:

- the start-up hook: ``sglang_overlay.pth`` calls ``install()`` in every interpreter, which puts
  a meta-path finder first; it wraps the real loader of sglang and of each patched module, and
  activates right after the module ran;
- sglang's plugin loader (entry point group ``sglang.srt.plugins``) calls ``activate()``.

Applying is idempotent, so whichever path comes second changes nothing. importlib holds its
global lock while ``find_spec`` runs, so ``find_spec`` imports nothing; the work happens after
``exec_module``, outside the lock. This module imports only ``sys`` and ``_thread`` at start-up.
A failed activation never breaks the user's import unless ``SGLANG_OVERLAY_STRICT=1``.
"""

import _thread
import sys

from sglang_overlay import PATCHED_MODULES, patches_of

# The patched modules, and sglang itself: a process that imported sglang records that it has
# the overlay, whether or not it ever imports a patched module.
WATCHED = frozenset({"sglang", *(n for names in PATCHED_MODULES.values() for n in names)})


class WorkspaceImportHook:
    """Meta-path finder for the watched modules; never finds anything itself."""

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
        on_import(module, via="start-up hook")


HOOK = WorkspaceImportHook()


def installed() -> bool:
    return HOOK in sys.meta_path


def install() -> None:
    """Put the finder first on ``sys.meta_path`` once. Never called from a finder: an insert
    at the front can make a concurrent import ask one finder twice, but never skip one."""
    if not installed():
        sys.meta_path.insert(0, HOOK)


def activate() -> None:
    """sglang's plugin loader's entry point: patch what is loaded, and watch what is not yet."""
    install()
    names = dict.fromkeys(n for modules in PATCHED_MODULES.values() for n in modules)
    loaded = [m for m in (sys.modules.get(n) for n in names) if m is not None]
    for module in loaded:
        on_import(module, via="sglang plugin loader")
    if not loaded:  # an sglang process that has not imported a patched module (yet) says so
        from sglang_overlay import overlay

        overlay.publish()


def on_import(module, via: str) -> None:
    """Right after ``module`` ran: patch a patched module, each of its patches on its own; for
    sglang itself, record that this process has the overlay. Never raises unless strict."""
    from sglang_overlay import config, overlay

    patch_ids = patches_of(getattr(module, "__name__", None))
    if not patch_ids:
        overlay.publish()
    for patch_id in patch_ids:
        try:
            overlay.apply_to_module(module, patch_id)
        except Exception as exc:  # inside the user's import: recorded and said once
            if isinstance(exc, overlay.UnsupportedShapeError) or config.strict():
                raise  # the user asked for an exception, on every attempt
            overlay.record_failure(patch_id, module.__name__, via, exc)
