"""Release-first replacement of sglang's DSV4 sparse-prefill scratch workspace.

Installing this package makes every Python process that imports sglang's DSV4 sparse-prefill
module drop the workspace's old tensor before allocating a replacement, so a replacement
needs max(old, new) memory instead of old + new. This module is the public surface only; it is
imported at interpreter start-up by the .pth hook and therefore imports nothing itself.
"""

__all__ = ["apply", "remove", "status", "PATCH_ID"]

PATCH_ID = "0001-dsv4-sparse-prefill-release-first"


def apply():
    """Import the workspace module and patch it now; returns the patch's status records."""
    from sglang_overlay import overlay

    return overlay.apply()


def remove():
    """Restore every patched method to the exact original function object."""
    from sglang_overlay import overlay

    return overlay.remove()


def status():
    """One record per patch: patch, target, sglang_version, state, reason."""
    from sglang_overlay import overlay

    return overlay.status()
