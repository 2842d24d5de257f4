"""Release-first replacement of sglang's scratch workspaces: each patch drops a buffer that a
method replaces before allocating its replacement. The public surface only; the .pth start-up
hook imports this package in every interpreter, so it loads nothing else.
"""

from sglang_overlay.patches import (
    FUSED_KV_PATCH_ID,
    PATCH_ID,
    PATCH_IDS,
    PATCHED_MODULES,
    WORKSPACE_MODULE,
    OverlayError,
    __version__,
)

__all__ = ["apply", "remove", "status", "PATCH_ID", "FUSED_KV_PATCH_ID", "PATCH_IDS",
           "PATCHED_MODULES", "WORKSPACE_MODULE", "OverlayError", "__version__"]  # fmt: skip


def __getattr__(name):  # apply, remove, status: overlay.py loads on first use only
    if name in ("apply", "remove", "status"):
        from sglang_overlay import overlay

        return getattr(overlay, name)
    raise AttributeError(f"module 'sglang_overlay' has no attribute {name!r}")
