"""Apply, remove and report the overlay's patches in this process, one record per patch,
checked against the live class by identity; each change of state is published.
"""

import functools
import importlib
import os
import sys
import threading
from collections import namedtuple

from sglang_overlay import PATCH_IDS, PATCHED_MODULES, OverlayError, config, observe, shapes
from sglang_overlay.observe import logger, warn_once

STATES = ("applied", "wrapped", "pending", "not-present", "upstream-fixed", "unsupported",
          "disabled", "replaced", "failed")  # fmt: skip
# A process runs the code it should: fixed, or unfixed on purpose.
OK_STATES = frozenset({"applied", "wrapped", "upstream-fixed", "not-present", "disabled"})


class UnsupportedShapeError(OverlayError):
    """Raised instead of a warning when SGLANG_OVERLAY_STRICT=1."""


# one method the overlay put on a class, with both function objects; one application of a
# patch to a module: every method it installed, or none
_Installed = namedtuple("_Installed", "site cls method original patched")
_Applied = namedtuple("_Applied", "patch_id module_name installed target reason")

_lock = threading.RLock()
_applied: "list[_Applied]" = []
_removed = False  # remove() keeps it off until apply()
_status: "dict[str, dict]" = {}  # patch id -> its record, in series order
_WAITING = {p: f"waiting for the import of {' or '.join(m)}" for p, m in PATCHED_MODULES.items()}
_REMOVED_REASON = "removed by sglang_overlay.remove(); apply() patches again"


def _new_lock_in_child() -> None:
    # A thread that forks while another holds the lock would hand the child a lock nobody
    # there can release. The child starts with a free one, and a record of its own.
    global _lock
    _lock = threading.RLock()
    if observe.forget_published():
        publish()


os.register_at_fork(after_in_child=_new_lock_in_child)


def status() -> list:
    """One record per patch, in series order, each checked against the live class."""
    return [_patch_status(p) for p in PATCH_IDS]


def _patch_status(patch_id: str) -> dict:
    with _lock:
        record = dict(_status[patch_id])
        done = [a for a in _applied if a.patch_id == patch_id]
        if done and record["state"] in ("applied", "wrapped", "replaced"):
            state, reason = _live_state(done[-1])
            if state != record["state"]:
                record.update(state=state, reason=reason)
        elif record["reason"] == _WAITING[patch_id]:
            seen = next((m for m in PATCHED_MODULES[patch_id] if m in sys.modules), None)
            disabled = config.disabled_reason(patch_id)
            if disabled is not None:  # what the setting does once the module is imported
                record.update(state="disabled", reason=disabled)
            elif seen is not None:
                record["reason"] = (
                    f"{seen} was imported without the start-up hook seeing it (a finder ahead "
                    "of it on sys.meta_path served the module, or the hook was removed or could "
                    "not load); this process runs unmodified sglang there; apply() patches now"
                )
    return record


def import_patched_modules(keep_going: bool = False) -> list:
    """Import each patch's module as any sglang process would, and report. A module missing,
    or a later patch's that raises ImportError here, is ``not-present``; any other raise is
    ``failed`` and propagates unless ``keep_going``."""
    for patch_id, names in PATCHED_MODULES.items():
        missing = None
        for name in names:
            try:
                importlib.import_module(name)
                break
            except Exception as exc:
                if isinstance(exc, ModuleNotFoundError) and name.startswith(exc.name or "\0"):
                    missing = exc.name
                    continue
                why = f"importing {name} raised {type(exc).__name__}: {exc}"
                absent = isinstance(exc, ImportError) and patch_id != PATCH_IDS[0]
                if absent:  # a later patch's module this environment cannot import
                    why = f"{why}; no process here runs it"
                _record(patch_id, "not-present" if absent else "failed", name, why)
                if not (absent or keep_going):
                    raise
                break
        else:
            reason = f"sglang {sglang_version()} has no {' or '.join(names)}"
            reason = "sglang is not installed" if missing == "sglang" else reason
            _record(patch_id, "not-present", names[0], reason)
    return status()


def apply() -> list:
    """Import each patch's module (where it exists) and apply the patch to it."""
    global _removed
    _removed = False
    import_patched_modules()
    for patch_id, names in PATCHED_MODULES.items():
        for module in filter(None, map(sys.modules.get, names)):
            apply_to_module(module, patch_id)  # a no-op where the start-up hook applied it
    return status()


def apply_to_module(module, patch_id: str) -> None:
    """Apply ``patch_id`` to ``module``: every method of the patch, or none."""
    patch_sites = shapes.SITES[patch_id]
    with _lock:
        # This patch's latest application to these classes (another patch of the same class,
        # or a reloaded module's new class, is not it).
        classes = [shapes.workspace_class(module, site) for site in patch_sites]
        mine = (a for a in reversed(_applied) if a.patch_id == patch_id)
        done = next((a for a in mine if any(i.cls in classes for i in a.installed)), None)
        if done is not None:
            state, reason = _live_state(done)
            if state == "applied":  # already applied; the other activation path got here first
                follow_registry()  # (sglang may have loaded its registry since)
                return
            if state != "pending":  # never stack a second copy under another vendor's hook
                _record(patch_id, state, done.target, reason)
                return
        if _removed:
            _record(patch_id, "pending", module.__name__, _REMOVED_REASON)
            return
        reason = config.disabled_reason(patch_id)
        if reason is not None:
            _record(patch_id, "disabled", module.__name__, reason)
            return
        each = [shapes.recognise(module, site) for site in patch_sites]
        found = shapes.all_or_none(each)
        if found.state != "recognised":
            _record(patch_id, found.state, found.target, found.reason)
            if found.state == "unsupported":
                version, reason = sglang_version(), found.reason
                message = f"sglang-overlay: {patch_id} left sglang {version} untouched: {reason}"
                if config.strict():
                    raise UnsupportedShapeError(message)
                warn_once(("unsupported", reason), "%s", message)
            return
        from sglang_overlay import release_first  # imports torch: only once sglang has

        installed = []
        for site, one in zip(patch_sites, each, strict=True):  # built before any is installed
            original = vars(one.cls)[one.method]
            built = release_first.build(site, one, module, publish)
            patched = functools.update_wrapper(built, original)
            patched.__sglang_overlay_patch__ = patch_id  # for people reading it; never trusted
            installed.append(_Installed(site, one.cls, one.method, original, patched))
        for one in installed:
            setattr(one.cls, one.method, one.patched)
        _applied.append(
            _Applied(patch_id, module.__name__, tuple(installed), found.target, found.reason)
        )
        follow_registry()  # a hook applied over ours later is published too
        _record(patch_id, "applied", found.target, found.reason)
        logger.info("sglang-overlay: %s applied to %s (%s)", patch_id, found.target, found.reason)


def record_failure(patch_id: str, module_name: str, via: str, exc: Exception) -> None:
    """Activation raised: this process runs unmodified sglang there, and says why once."""
    reason = f"activation via the {via} raised {type(exc).__name__}: {exc}"
    _record(patch_id, "failed", module_name, reason)
    message = "sglang-overlay: %s left unpatched (this process runs unmodified sglang): %s"
    warn_once(("failed", type(exc).__name__, str(exc)), message, module_name, reason)


def remove() -> list:
    """Put back the original methods; keep the overlay off here until ``apply()``."""
    global _removed
    with _lock:
        _removed = True
        outcome = {p: ("pending", _status[p]["target"], _REMOVED_REASON) for p in PATCH_IDS}
        kept = []
        while _applied:
            done = _applied.pop()
            hook, hooked = _foreign_hook(done)
            for one in done.installed:
                if vars(one.cls).get(one.method) is one.patched:
                    setattr(one.cls, one.method, one.original)
            if hook is not None:  # ours runs inside someone else's function: say so
                kept.append(done._replace(installed=hooked))
                why = f"remove() cannot take release-first out: {hook[1]}"
                outcome[done.patch_id] = (hook[0], done.target, why)
        _applied.extend(reversed(kept))
        for patch_id, (state, target, reason) in outcome.items():
            _record(patch_id, state, target, reason)
        return status()


def _foreign_hook(done) -> "tuple[tuple[str, str] | None, tuple[_Installed, ...]]":
    """Another plugin's hook over ``done``'s methods (replaced before wrapped), and those."""
    hook, hooked = None, ()
    for one in done.installed:
        found = shapes.foreign_hook(vars(one.cls).get(one.method), one.patched)
        if found is not None:
            hooked += (one,)
            hook = found if hook is None or found[0] == "replaced" else hook
    return hook, hooked


def _live_state(done) -> "tuple[str, str]":
    """What runs now where ``done``'s methods were installed, by identity: applied, wrapped or
    replaced by another plugin's hook, or pending (reloaded, or replaced by other code)."""
    registered = sys.modules.get(done.module_name)
    hook, hooked = _foreign_hook(done)
    for one in done.installed:
        current = registered is None or shapes.workspace_class(registered, one.site) is one.cls
        if not current or (vars(one.cls).get(one.method) is not one.patched and one not in hooked):
            return (
                "pending",
                f"{one.cls.__name__}.{one.method} is no longer the patched function (the module "
                "was reloaded or the method replaced by other code); apply() patches again",
            )
    return hook or ("applied", done.reason)


def follow_registry() -> None:
    """Publish again after each ``HookRegistry.apply_hooks`` of a loaded registry (another
    plugin's REPLACE or AROUND lands there)."""
    registry = getattr(sys.modules.get("sglang.srt.plugins.hook_registry"), "HookRegistry", None)
    current = vars(registry).get("apply_hooks") if isinstance(registry, type) else None
    if not isinstance(current, classmethod) or hasattr(current.__func__, "__sglang_overlay__"):
        return  # no registry loaded, or it follows already
    apply_hooks = current.__func__

    @functools.wraps(apply_hooks)
    def then_publish(cls, *args, **kwargs):
        try:
            return apply_hooks(cls, *args, **kwargs)
        finally:
            publish()

    then_publish.__sglang_overlay__ = True
    registry.apply_hooks = classmethod(then_publish)


def sglang_version() -> str:
    """The sglang version, without importing sglang or torch."""
    loaded = getattr(sys.modules.get("sglang.version"), "__version__", None)
    if isinstance(loaded, str):
        return loaded
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return "not installed"


def publish() -> None:
    """Publish this process's records, each with its workspace's high-water mark."""
    logs = sys.modules.get("sglang_overlay.release_first")  # imported once a patch applied
    with _lock:
        patches = [
            {**r, "high_water_bytes": logs.LOGS[r["patch"]].high_water_bytes if logs else 0,
             "workspace_imported": any(m in sys.modules for m in PATCHED_MODULES[r["patch"]])}
            for r in status()
        ]  # fmt: skip
        observe.publish(patches, config.problems(), STATES)


def _record(patch_id, state, target, reason, publishing=True) -> None:
    version = sglang_version()
    with _lock:
        _status[patch_id] = {"patch": patch_id, "target": target, "sglang_version": version,
                             "state": state, "reason": reason}  # fmt: skip
        if publishing:
            publish()


for _p in PATCH_IDS:
    _record(_p, "pending", PATCHED_MODULES[_p][0], _WAITING[_p], publishing=False)
