"""Apply, remove and report the overlay's patch in this process.

Applying twice is a no-op; removing puts back the exact original function object. ``status()``
checks the kept record against the live class by identity: the method is the overlay's only if
it is the very function object installed here (README.md, "Control and visibility"). Each change
of state is published for operators (``publish``: the per-process record and the gauges).
"""

import functools
import importlib
import os
import sys
import threading
from dataclasses import asdict, dataclass, replace

from sglang_overlay import PATCH_ID, __version__, config, hook_watch, shapes
from sglang_overlay.notices import logger, warn_once

STATES = (
    "applied",
    "wrapped",
    "pending",
    "not-present",
    "upstream-fixed",
    "unsupported",
    "disabled",
    "replaced",
    "failed",
)
# States in which a process of this environment runs the code it should: fixed, or on purpose
# not fixed. Anything else means "unmodified sglang although the overlay is installed".
OK_STATES = frozenset({"applied", "wrapped", "upstream-fixed", "not-present", "disabled"})


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
    target: str
    reason: str


# importlib.reload() of this module keeps what this process applied: status() and remove()
# must go on describing and undoing the patch that is live in sglang's class.
_lock = globals().get("_lock") or threading.RLock()
_applied: "list[_Applied]" = globals().get("_applied", [])
_removed = globals().get("_removed", False)  # remove() keeps it off until apply()
_published = globals().get("_published")  # what publish() last wrote
_WAITING_REASON = f"waiting for the import of {shapes.WORKSPACE_MODULE}"
_status = globals().get("_status") or PatchStatus(
    PATCH_ID, shapes.WORKSPACE_MODULE, "unknown", "pending", _WAITING_REASON
)
_UNSEEN_REASON = (
    f"{shapes.WORKSPACE_MODULE} was imported without the start-up hook seeing it (a finder "
    "ahead of it on sys.meta_path served the module, or the hook was removed or could not "
    "load); this process runs unmodified sglang; apply() patches now"
)
_REMOVED_REASON = "removed by sglang_overlay.remove(); apply() patches again"


def _new_lock_in_child() -> None:
    # The lock is held while patching and logging; a thread that forks meanwhile would hand
    # the child a lock no thread of the child can release (sglang's load_plugins() there, or
    # status(), would wait forever). The child's only thread starts with a free one, and a
    # record of its own: it runs what its parent patched.
    global _lock, _published
    _lock = threading.RLock()
    if _published is not None:
        _published = None
        publish()


if hasattr(os, "register_at_fork") and not globals().get("_fork_hook_registered"):
    os.register_at_fork(after_in_child=_new_lock_in_child)
    _fork_hook_registered = True


def status() -> list:
    with _lock:
        record = _status
        if _applied and record.state in ("applied", "wrapped", "replaced"):
            state, reason = _live_state(_applied[-1])
            if state != record.state:
                record = replace(record, state=state, reason=reason)
        elif record.reason == _WAITING_REASON and shapes.WORKSPACE_MODULE in sys.modules:
            record = replace(record, reason=_UNSEEN_REASON)
    if record.sglang_version == "unknown":  # nothing has looked yet
        record = replace(record, sglang_version=sglang_version())
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
        cls = shapes.workspace_class(module)
        done = next((a for a in reversed(_applied) if a.cls is cls), None)
        if done is not None:
            live = vars(cls).get(done.method)
            if live is done.patched:  # already applied; the other activation path got here first
                hook_watch.follow(publish)  # (sglang may have loaded its registry since)
                return
            hook = _foreign_hook(live, done.patched)
            if hook is not None:  # never stack a second copy under another vendor's hook
                _record(hook[0], done.target, hook[1])
                return
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

        method = found.shape.method
        original = vars(found.cls)[method]
        patched = functools.update_wrapper(
            release_first.build(found.shape, module, publish), original
        )
        patched.__sglang_overlay_patch__ = PATCH_ID  # for people reading it; never trusted
        setattr(found.cls, method, patched)
        done = _Applied(
            module.__name__, found.cls, method, original, patched, found.target, found.reason
        )
        _applied.append(done)
        hook_watch.follow(publish)  # a hook applied over ours later is published too
        _record("applied", found.target, found.reason)
        logger.info("sglang-overlay: %s applied to %s (%s)", PATCH_ID, found.target, found.reason)


def record_failure(target: str, reason: str) -> None:
    """Activation raised: this process runs unmodified sglang, and says why."""
    with _lock:
        _record("failed", target, reason)


def remove() -> list:
    global _removed
    with _lock:
        _removed = True
        target, blocked, kept = shapes.WORKSPACE_MODULE, None, []
        while _applied:
            done = _applied.pop()
            target = done.target
            live = vars(done.cls).get(done.method)
            if live is done.patched:
                setattr(done.cls, done.method, done.original)
                continue
            hook = _foreign_hook(live, done.patched)
            if hook is not None:  # ours runs inside someone else's function: say so
                kept.append(done)
                blocked = (hook[0], f"remove() cannot take release-first out: {hook[1]}")
        _applied.extend(reversed(kept))
        state, reason = blocked or ("pending", _REMOVED_REASON)
        _record(state, target, reason)
        return status()


def _live_state(done) -> "tuple[str, str]":
    """What runs now where the overlay installed ``done.patched``, by identity."""
    name = f"{done.cls.__name__}.{done.method}"
    registered = sys.modules.get(done.module_name)
    if registered is None or shapes.workspace_class(registered) is done.cls:
        live = vars(done.cls).get(done.method)
        if live is done.patched:
            return "applied", done.reason
        hook = _foreign_hook(live, done.patched)
        if hook is not None:
            return hook
    return (
        "pending",
        f"{name} is no longer the patched function (the module was reloaded or the method "
        "replaced by other code); apply() patches again",
    )


def _foreign_hook(live, ours) -> "tuple[str, str] | None":
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


def publish() -> None:
    """Write this process's record and set its gauges, when its state or its workspace's
    high-water mark changed since the last time; never raises."""
    global _published
    with _lock:
        try:
            patches = status()
            replacements = sys.modules.get("sglang_overlay.release_first")
            high_water = replacements.REPLACEMENTS.high_water_bytes if replacements else 0
            misconfigured = config.problems()
            key = (tuple((r["state"], r["reason"]) for r in patches), high_water, *misconfigured)
            if key == _published:
                return
            _published = key
            fields = {
                "patches": patches,
                "high_water_bytes": high_water,
                "workspace_imported": shapes.WORKSPACE_MODULE in sys.modules,
                "misconfigured": misconfigured,
                "overlay_version": __version__,
                "overlay_path": os.path.dirname(os.path.abspath(__file__)),
                "python": sys.executable,
            }
            from sglang_overlay import metrics, records

            records.write(fields)
            metrics.update(fields, STATES)
        except Exception:  # reporting must never break the process it reports on
            pass


def _record(state: str, target: str, reason: str) -> None:
    global _status
    _status = PatchStatus(PATCH_ID, target, sglang_version(), state, reason)
    publish()


def _refuse(reason: str) -> None:
    message = f"sglang-overlay: {PATCH_ID} left sglang {sglang_version()} untouched: {reason}"
    if config.strict():
        raise UnsupportedShapeError(message)
    warn_once(("unsupported", reason), "%s", message)
