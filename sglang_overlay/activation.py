"""The two activation paths, funnelled into ``on_workspace_import``: the start-up hook calls
it right after the workspace module runs; sglang's plugin loader calls ``activate``. Applying
is idempotent, so whichever path comes second changes nothing. A failed activation never
breaks the user's import unless ``SGLANG_OVERLAY_STRICT=1``; the next attempt tries again.
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
