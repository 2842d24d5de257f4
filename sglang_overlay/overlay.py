"""Apply, remove and report the overlay's patch in this process.

A patch is a record with an id, a target and a reason; applying twice is a no-op and removing
puts back the exact original function object. Every outcome is kept as a status record, and a
shape the overlay does not recognise is left untouched with one warning (or an exception under
``SGLANG_OVERLAY_STRICT=1``).
"""

import functools
import importlib
import logging
import threading
import warnings
from dataclasses import asdict, dataclass

from sglang_overlay import PATCH_ID, config, shapes

logger = logging.getLogger("sglang_overlay")

STATES = ("applied", "pending", "not-present", "upstream-fixed", "unsupported", "disabled")


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
    cls: type
    method: str
    original: object
    patched: object


_lock = threading.RLock()
_applied: "list[_Applied]" = []
_status = PatchStatus(
    PATCH_ID,
    shapes.WORKSPACE_MODULE,
    "unknown",
    "pending",
    f"waiting for the import of {shapes.WORKSPACE_MODULE}",
)
_warned = False


def status() -> list:
    with _lock:
        record = asdict(_status)
    if record["sglang_version"] == "unknown":  # nothing has looked yet
        record["sglang_version"] = sglang_version()
    return [record]


def apply() -> list:
    """Import the workspace module (if it exists) and apply the patch to it."""
    try:
        module = importlib.import_module(shapes.WORKSPACE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name is None or not shapes.WORKSPACE_MODULE.startswith(exc.name):
            raise
        reason = (
            "sglang is not installed"
            if exc.name == "sglang"
            else f"sglang {sglang_version()} has no {exc.name}"
        )
        _record("not-present", shapes.WORKSPACE_MODULE, reason)
        return status()
    # Importing may have run the post-import hook already; applying again is a no-op.
    apply_to_module(module)
    return status()


def apply_to_module(module) -> None:
    with _lock:
        if _patched_method(module) is not None:
            return  # already applied; the other activation path got here first
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
        _applied.append(_Applied(found.cls, found.shape.method, original, patched))
        _record("applied", found.target, found.reason)
        logger.info("sglang-overlay: %s applied to %s (%s)", PATCH_ID, found.target, found.reason)


def remove() -> list:
    with _lock:
        while _applied:
            done = _applied.pop()
            if vars(done.cls).get(done.method) is done.patched:
                setattr(done.cls, done.method, done.original)
            target = f"{shapes.WORKSPACE_MODULE}.{done.cls.__name__}.{done.method}"
            _record("pending", target, "removed by sglang_overlay.remove(); apply() patches again")
        return status()


def _patched_method(module):
    cls = shapes.workspace_class(module)
    for name in ("_reserve", "get"):
        method = vars(cls).get(name) if cls is not None else None
        if getattr(method, "__sglang_overlay_patch__", None) == PATCH_ID:
            return method
    return None


def sglang_version() -> str:
    try:
        from sglang.version import __version__

        return __version__
    except Exception:
        pass
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return "not installed"


def _record(state: str, target: str, reason: str) -> None:
    global _status
    _status = PatchStatus(PATCH_ID, target, sglang_version(), state, reason)


def _refuse(reason: str) -> None:
    global _warned
    message = f"sglang-overlay: {PATCH_ID} left sglang {sglang_version()} untouched: {reason}"
    if config.strict():
        raise UnsupportedShapeError(message)
    if not _warned:
        _warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)
