"""How the overlay reaches every sglang process, by two paths that end in ``on_import``:

- the start-up hook: ``sglang_overlay.pth`` calls ``install()`` in every interpreter, which puts
  a meta-path finder first; it wraps the loader of sglang and of each patched module, and
  activates right after the module ran;
- sglang's plugin loader (entry point group ``sglang.srt.plugins``) calls ``activate()``.

Applying is idempotent, so the second path changes nothing. importlib holds its lock while
``find_spec`` runs, so ``find_spec`` imports nothing; the work happens after ``exec_module``.
This module imports only ``sys`` and ``_thread`` at start-up. A failed activation never breaks
the user's import unless ``SGLANG_OVERLAY_STRICT=1``.
"""

import _thread
import sys

from sglang_overlay.patches import PATCHED_MODULES, patches_of

# The patched modules, and sglang itself: a process that imported sglang records that it has
# the overlay, whether or not it ever imports a patched module.
WATCHED = frozenset({"sglang", *(n for names in PATCHED_MODULES.values() for n in names)})


class WorkspaceImportHook:
    """Meta-path finder for the watched modules; never finds anything itself."""

    def __init__(self):
        # Threads inside find_spec: a finder that calls importlib.util.find_spec from its own
        # find_spec must not recurse into us.
        self._searching = set()

    def find_spec(self, fullname, path=None, target=None):
        me = _thread.get_ident()
        if fullname not in WATCHED or me in self._searching:
            return None
        try:  # the add inside: a KeyboardInterrupt right after it must not leave us marked
            self._searching.add(me)
            spec = None
            finders = list(sys.meta_path)  # a snapshot: another thread may be iterating it
            for finder in finders[finders.index(self) + 1 :] if self in finders else finders:
                if finder is not self and hasattr(finder, "find_spec"):
                    spec = finder.find_spec(fullname, path, target)
                    if spec is not None:
                        break
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

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        # Put the real loader back first: the module must look as if we were never here.
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        if module.__spec__.loader is self:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        on_import(module, via="start-up hook")


HOOK = WorkspaceImportHook()


def installed() -> bool:
    return HOOK in sys.meta_path


def install() -> None:
    """Put the finder first on ``sys.meta_path`` once (never from a finder)."""
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


def apply():
    """Import the patched modules and patch them now; returns the patches' status records."""
    from sglang_overlay import overlay

    return overlay.apply()


def remove():
    """Put back the original methods and keep the overlay off here until ``apply()``."""
    from sglang_overlay import overlay

    return overlay.remove()


def status():
    """This process's records, one per patch, checked against the live classes."""
    from sglang_overlay import overlay

    return overlay.status()
