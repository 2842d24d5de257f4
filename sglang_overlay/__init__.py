"""Release-first replacement of sglang's scratch workspaces: each patch drops a buffer that a
method replaces before allocating its replacement. The public surface, and the overlay's
patches in series order with the modules each patches right after they run (under every name
releases gave them). Imports nothing: the .pth start-up hook loads this package in every
interpreter. A new patch is one row in ``PATCHED_MODULES`` and a ``shapes.Site`` per method.
"""

# The one place the version lives: the build, the CLI and every process record read it.
__version__ = "0.2.0"


class OverlayError(Exception):
    """The base of every exception the overlay raises on purpose."""


PATCH_ID = "0001-dsv4-sparse-prefill-release-first"
WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
FUSED_KV_PATCH_ID = "0003-fused-kv-workspace-release-first"
PATCHED_MODULES = {
    PATCH_ID: (WORKSPACE_MODULE,),
    FUSED_KV_PATCH_ID: (  # 0.5.16 and later, then 0.5.15
        "sglang.kernels.ops.speculative.fused_kv_materialize",
        "sglang.srt.speculative.triton_ops.fused_kv_materialize",
    ),
    "0005-dflash-draft-probs-release-first": ("sglang.srt.speculative.dflash_worker_v2",),
    "0007-dsa-q8kv8-release-first": ("sglang.srt.layers.attention.dsa_backend",),
    "0009-dsv4-q8kv8-qpad-release-first": ("sglang.srt.layers.attention.deepseek_v4_backend",),
    "0011-dsa-q8kv8-born-q-release-first": ("sglang.srt.layers.attention.dsa_backend",),
}
PATCH_IDS = tuple(PATCHED_MODULES)


def __getattr__(name):  # apply, remove, status: overlay.py loads on first use only
    if name in ("apply", "remove", "status"):
        from sglang_overlay import overlay

        return getattr(overlay, name)
    raise AttributeError(f"module 'sglang_overlay' has no attribute {name!r}")
