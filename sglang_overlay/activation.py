"""The two activation paths, funnelled into ``on_workspace_import``: the start-up hook calls
it right after a patched module runs; sglang's plugin loader calls ``plugin.activate``. Applying
is idempotent, so whichever path comes second changes nothing. A failed activation never
breaks the user's import unless ``SGLANG_OVERLAY_STRICT=1``; the next attempt tries again.
"""

from sglang_overlay import patches_of


def on_import(module, via: str) -> None:
    """What the start-up hook calls right after ``module`` ran: patch a patched module; for
    sglang itself, record that this process has the overlay (and has not imported a patched
    module yet), so that ``status --processes`` can tell it from one without."""
    if patches_of(getattr(module, "__name__", None)):
        on_workspace_import(module, via)
        return
    from sglang_overlay import overlay

    overlay.publish()


def on_workspace_import(module, via: str) -> None:
    """Patch a freshly executed (or reloaded) patched module, each of its patches on its own;
    never raise unless strict."""
    from sglang_overlay import overlay

    for patch_id in patches_of(module.__name__):
        try:
            overlay.apply_to_module(module, patch_id)
        except Exception as exc:  # inside the user's import: recorded and said once, below
            _fail(exc, via, module.__name__, patch_id)


def _fail(exc: Exception, via: str, module_name: str, patch_id: str) -> None:
    from sglang_overlay import config, overlay
    from sglang_overlay.notices import warn_once

    if isinstance(exc, overlay.UnsupportedShapeError) or config.strict():
        raise exc  # the user asked for an exception, on every attempt
    reason = f"activation via the {via} raised {type(exc).__name__}: {exc}"
    overlay.record_failure(patch_id, module_name, reason)
    message = "sglang-overlay: %s left unpatched (this process runs unmodified sglang): %s"
    warn_once(("failed", type(exc).__name__, str(exc)), message, module_name, reason)
