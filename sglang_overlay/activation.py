"""The two activation paths, funnelled into ``on_workspace_import``.

The start-up hook (``import_hook``) calls ``on_workspace_import`` right after the workspace
module runs, in every process of the environment; sglang's general-plugin loader calls
``activate`` (entry point group ``sglang.srt.plugins``) in the processes sglang starts, which
patches a module that is already imported and otherwise makes sure the start-up hook is in
place (for an interpreter started without site processing, for example). Applying is
idempotent, so whichever path comes second changes nothing. Both paths honour sglang's
``SGLANG_PLUGINS`` allow-list (``config``): a list without ``sglang_overlay`` leaves the
method alone, and the process reports ``disabled`` with that reason.

A failed activation never breaks the user's import: this process runs unmodified sglang,
``status()`` says ``failed`` and why, one WARNING is logged, and the next import, reload or
``activate()`` tries again. Under ``SGLANG_OVERLAY_STRICT=1`` every attempt raises instead.
"""

import sys

from sglang_overlay import WORKSPACE_MODULE


def activate() -> None:
    """Entry point for sglang's plugin loader."""
    from sglang_overlay import import_hook

    import_hook.install()
    module = sys.modules.get(WORKSPACE_MODULE)
    if module is not None:
        on_workspace_import(module, via="sglang plugin loader")
        return
    try:  # an sglang process that has not imported the module (yet): it says so too
        from sglang_overlay import overlay

        overlay.publish()
    except Exception:
        pass


def on_workspace_import(module, via: str) -> None:
    """Patch a freshly executed (or reloaded) workspace module; never raise unless strict."""
    try:
        from sglang_overlay import overlay

        overlay.apply_to_module(module)
    except Exception as exc:
        _fail(exc, via)


def _fail(exc: Exception, via: str) -> None:
    if type(exc).__name__ == "UnsupportedShapeError" or _strict():
        raise exc  # the user asked for an exception, on every attempt
    reason = f"activation via the {via} raised {type(exc).__name__}: {exc}"
    try:
        from sglang_overlay import overlay

        overlay.record_failure(WORKSPACE_MODULE, reason)
    except Exception:
        pass  # overlay itself did not import; the WARNING below still says what happened
    message = "sglang-overlay: %s left unpatched (this process runs unmodified sglang): %s"
    try:
        from sglang_overlay.notices import warn_once  # logging and threading only
    except Exception:  # a damaged install: still say it, still keep the user's import
        import logging

        logging.getLogger("sglang_overlay").warning(message, WORKSPACE_MODULE, reason)
        return
    warn_once(("failed", type(exc).__name__, str(exc)), message, WORKSPACE_MODULE, reason)


def _strict() -> bool:
    try:
        from sglang_overlay import config

        return config.strict()
    except Exception:
        return False
