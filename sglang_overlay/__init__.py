"""Release-first replacement of sglang's DSV4 sparse-prefill scratch workspace.

The public surface only (README.md, "Using the overlay"): the .pth start-up hook imports this
module in every interpreter, so it imports nothing itself.
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
    """Put back the original method and keep the overlay off here until ``apply()``."""
    from sglang_overlay import overlay

    return overlay.remove()


def status():
    """This process's records, one per patch, checked against the live class."""
    from sglang_overlay import overlay

    return overlay.status()
