"""Release-first replacement of sglang's scratch workspaces: each patch of ``PATCHED_MODULES``
drops a buffer that a method replaces before allocating its replacement (the DSV4
sparse-prefill workspace, DFlash's fused KV workspaces and draft probabilities, the q8kv8
scratch of the DSA and DSV4 fp8 prefills, ...).

The public surface only: the .pth start-up hook imports this module in every interpreter, so
it imports nothing itself.
"""

__all__ = [
    "apply",
    "remove",
    "status",
    "PATCH_ID",
    "FUSED_KV_PATCH_ID",
    "PATCH_IDS",
    "PATCHED_MODULES",
    "WORKSPACE_MODULE",
    "OverlayError",
    "__version__",
]

# The one place the version lives: the build reads it from here (pyproject.toml), the CLI
# and every process record report it. Bumped with every release (CHANGELOG.md).
__version__ = "0.2.0"


class OverlayError(Exception):
    """The base of every exception the overlay raises on purpose."""


PATCH_ID = "0001-dsv4-sparse-prefill-release-first"
WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
FUSED_KV_PATCH_ID = "0003-fused-kv-workspace-release-first"
# Where releases define FusedKVMaterializeHelper: 0.5.16 and later, then 0.5.15.
FUSED_KV_MODULES = (
    "sglang.kernels.ops.speculative.fused_kv_materialize",
    "sglang.srt.speculative.triton_ops.fused_kv_materialize",
)
# Each patch (in series order) and the modules it patches right after they run (under any of
# the names releases gave them). A new patch is one row here (this module imports nothing, so
# the start-up hook can read it) and a ``sites.Site`` per method it replaces, with its shapes;
# several patches may patch one module, and one class.
PATCHED_MODULES = {
    PATCH_ID: (WORKSPACE_MODULE,),
    FUSED_KV_PATCH_ID: FUSED_KV_MODULES,
    "0005-dflash-draft-probs-release-first": ("sglang.srt.speculative.dflash_worker_v2",),
    "0007-dsa-q8kv8-release-first": ("sglang.srt.layers.attention.dsa_backend",),
    "0009-dsv4-q8kv8-qpad-release-first": ("sglang.srt.layers.attention.deepseek_v4_backend",),
    "0011-dsa-q8kv8-born-q-release-first": ("sglang.srt.layers.attention.dsa_backend",),
}
PATCH_IDS = tuple(PATCHED_MODULES)


def patches_of(module_name) -> "tuple[str, ...]":
    """The patches that patch ``module_name``, in series order (none: empty)."""
    return tuple(p for p, modules in PATCHED_MODULES.items() if module_name in modules)


def apply():
    """Import the patched modules and patch them now; returns the patches' status records."""
    from sglang_overlay import overlay

    return overlay.apply()


def remove():
    """Put back the original methods and keep the overlay off here until ``apply()``."""
    from sglang_overlay import overlay

    return overlay.remove()


def status():
    """This process's records, one per patch, checked against the live classes."""
    from sglang_overlay import overlay

    return overlay.status()
