"""Release-first replacement of sglang's DSV4 sparse-prefill scratch workspace.

Installing this package makes every Python process that imports sglang's DSV4 sparse-prefill
module drop the workspace's old tensor before allocating a replacement, so a replacement
needs max(old, new) memory instead of old + new. This module is the public surface only; it is
imported at interpreter start-up by the .pth hook and therefore imports nothing itself.
"""

__all__ = ["apply", "remove", "status", "PATCH_ID", "WORKSPACE_MODULE", "__version__"]

# The one place the version lives: the build reads it from here (pyproject.toml), the CLI
# and every process record report it. Bumped with every release (CHANGELOG.md).
__version__ = "0.2.0"

PATCH_ID = "0001-dsv4-sparse-prefill-release-first"
WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"


def apply():
    """Import the workspace module and patch it now; returns the patch's status records."""
    from sglang_overlay import overlay

    return overlay.apply()


def remove():
    """Restore every patched method to the exact original function object and keep the
    overlay off in this process (a reload stays unpatched) until ``apply()``."""
    from sglang_overlay import overlay

    return overlay.remove()


def status():
    """This process's records, one per patch: patch, target, sglang_version, state, reason.

    Checked against the live class, so a reload or a foreign replacement is reported, never
    hidden. ``sglang-overlay status`` asks a fresh process of the environment instead."""
    from sglang_overlay import overlay

    return overlay.status()
