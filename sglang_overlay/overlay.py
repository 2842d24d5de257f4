"""Apply, remove and report the overlay's patch in this process.

A patch is a record with an id, a target and a reason; applying twice is a no-op and removing
puts back the exact original function object. Every outcome is kept as a status record, and
``status()`` checks an ``applied`` record against the live class before reporting it, so a
reload or a foreign replacement shows up as what it is. A shape the overlay does not recognise
is left untouched with one WARNING (or ``UnsupportedShapeError`` under
``SGLANG_OVERLAY_STRICT=1``, on every attempt).
"""

import functools
import importlib
import os
import sys
import threading
from dataclasses import asdict, dataclass

from sglang_overlay import PATCH_ID, config, shapes
from sglang_overlay.notices import logger, warn_once

STATES = (
    "applied",
    "pending",
    "not-present",
    "upstream-fixed",
    "unsupported",
    "disabled",
    "failed",
)
# States in which a process of this environment runs the code it should: fixed, or on purpose
# not fixed. Anything else means "unmodified sglang although the overlay is installed".
OK_STATES = frozenset({"applied", "upstream-fixed", "not-present", "disabled"})


class UnsupportedShapeError(RuntimeError):
    """Raised instead of a warning when SGLANG_OVERLAY_STRICT=1."""


@dataclass(frozen=True)
class PatchStatus:
    patch: str
    target: str
    sglang_version: str
    state: str
    reason: str


@dataclass(frozen=True)
class _Applied:
    module_name: str
    cls: type
    method: str
    original: object
    patched: object


# importlib.reload() of this module keeps what this process applied: status() and remove()
# must go on describing and undoing the patch that is live in sglang's class.
_lock = globals().get("_lock") or threading.RLock()
_applied: "list[_Applied]" = globals().get("_applied", [])
_removed = globals().get("_removed", False)  # remove() keeps it off until apply()
_WAITING_REASON = f"waiting for the import of {shapes.WORKSPACE_MODULE}"
_status = globals().get("_status") or PatchStatus(
    PATCH_ID, shapes.WORKSPACE_MODULE, "unknown", "pending", _WAITING_REASON
)
_UNSEEN_REASON = (
    f"{shapes.WORKSPACE_MODULE} was imported without the start-up hook seeing it (a finder "
    "ahead of it on sys.meta_path served the module, or the hook was removed or could not "
    "load); this process runs unmodified sglang; apply() patches now"
)


def _new_lock_in_child() -> None:
    # The lock is held while patching and logging; a thread that forks meanwhile would hand
    # the child a lock no thread of the child can release (sglang's load_plugins() there, or
    # status(), would wait forever). The child's only thread starts with a free one.
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork") and not globals().get("_fork_hook_registered"):
    os.register_at_fork(after_in_child=_new_lock_in_child)
    _fork_hook_registered = True


def status() -> list:
    with _lock:
        record = _status
        if record.state == "applied" and not _still_applied():
            last = _applied[-1]
            record = PatchStatus(
                PATCH_ID,
                record.target,
                record.sglang_version,
                "pending",
                f"{last.cls.__name__}.{last.method} is no longer the patched function (the "
                "module was reloaded or the method replaced by other code); apply() patches "
                "again",
            )
        elif record.reason == _WAITING_REASON and shapes.WORKSPACE_MODULE in sys.modules:
            record = PatchStatus(**{**asdict(record), "reason": _UNSEEN_REASON})
    if record.sglang_version == "unknown":  # nothing has looked yet
        record = PatchStatus(**{**asdict(record), "sglang_version": sglang_version()})
    return [asdict(record)]


def import_workspace_module() -> list:
    """Import the workspace module as any sglang process would and report; patches nothing
    itself (in a process with the start-up hook, the import does)."""
    try:
        importlib.import_module(shapes.WORKSPACE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name is None or not shapes.WORKSPACE_MODULE.startswith(exc.name):
            raise
        reason = (
            "sglang is not installed"
            if exc.name == "sglang"
            else f"sglang {sglang_version()} has no {exc.name}"
        )
        with _lock:
            _record("not-present", shapes.WORKSPACE_MODULE, reason)
    return status()


def apply() -> list:
    """Import the workspace module (if it exists) and apply the patch to it."""
    global _removed
    with _lock:
        _removed = False
    records = import_workspace_module()
    module = sys.modules.get(shapes.WORKSPACE_MODULE)
    if module is not None:
        # The import may have run the start-up hook already; applying again is a no-op.
        apply_to_module(module)
        records = status()
    return records


def apply_to_module(module) -> None:
    with _lock:
        if _patched_method(module) is not None:
            return  # already applied; the other activation path got here first
        if _removed:
            _record("pending", shapes.WORKSPACE_MODULE, _REMOVED_REASON)
            return
        reason = config.disabled_reason(PATCH_ID)
        if reason is not None:
            _record("disabled", shapes.WORKSPACE_MODULE, reason)
            return
        found = shapes.recognise(module)
        if found.state != "recognised":
            _record(found.state, found.target, found.reason)
            if found.state == "unsupported":
                _refuse(found.reason)
            return
        from sglang_overlay import release_first  # imports torch: only once sglang has

        original = vars(found.cls)[found.shape.method]
        patched = functools.update_wrapper(release_first.build(found.shape, module), original)
        patched.__sglang_overlay_patch__ = PATCH_ID
        setattr(found.cls, found.shape.method, patched)
        _applied.append(_Applied(module.__name__, found.cls, found.shape.method, original, patched))
        _record("applied", found.target, found.reason)
        logger.info("sglang-overlay: %s applied to %s (%s)", PATCH_ID, found.target, found.reason)


def record_failure(target: str, reason: str) -> None:
    """Activation raised: this process runs unmodified sglang, and says why."""
    with _lock:
        _record("failed", target, reason)


_REMOVED_REASON = "removed by sglang_overlay.remove(); apply() patches again"


def remove() -> list:
    global _removed
    with _lock:
        _removed = True
        target = shapes.WORKSPACE_MODULE
        while _applied:
            done = _applied.pop()
            if vars(done.cls).get(done.method) is done.patched:
                setattr(done.cls, done.method, done.original)
            target = f"{shapes.WORKSPACE_MODULE}.{done.cls.__name__}.{done.method}"
        _record("pending", target, _REMOVED_REASON)
        return status()


def _still_applied() -> bool:
    if not _applied:
        return False
    last = _applied[-1]
    if vars(last.cls).get(last.method) is not last.patched:
        return False
    registered = sys.modules.get(last.module_name)
    return registered is None or shapes.workspace_class(registered) is last.cls


def _patched_method(module):
    cls = shapes.workspace_class(module)
    for name in ("_reserve", "get"):
        method = vars(cls).get(name) if cls is not None else None
        if getattr(method, "__sglang_overlay_patch__", None) == PATCH_ID:
            return method
    return None


def sglang_version() -> str:
    """The sglang version, without importing sglang or torch: the loaded ``sglang.version``
    module if some import already brought it in, else the installed package's metadata."""
    loaded = getattr(sys.modules.get("sglang.version"), "__version__", None)
    if isinstance(loaded, str):
        return loaded
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        import importlib.util

        found = "sglang" in sys.modules or importlib.util.find_spec("sglang") is not None
        return "unknown (no package metadata)" if found else "not installed"
    except Exception as exc:  # a broken dist-info must not break a status report
        return f"unknown ({type(exc).__name__})"


def _record(state: str, target: str, reason: str) -> None:
    global _status
    _status = PatchStatus(PATCH_ID, target, sglang_version(), state, reason)


def _refuse(reason: str) -> None:
    message = f"sglang-overlay: {PATCH_ID} left sglang {sglang_version()} untouched: {reason}"
    if config.strict():
        raise UnsupportedShapeError(message)
    warn_once(("unsupported", reason), "%s", message)
