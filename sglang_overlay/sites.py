"""The overlay's table: each method a patch replaces (a ``Site``), its class under every
published name, the attributes released first, and each release's method as the overlay knows
it (``WorkspaceShape``: the sha256 of its exact source text, and of its code object where only
bytecode is deployed). A new fix is rows here and one row of ``patches.PATCHED_MODULES``.
"""

from dataclasses import dataclass

from sglang_overlay.patches import FUSED_KV_PATCH_ID, PATCH_ID

WORKSPACE_CLASSES = ("SparsePrefillKVBuffer", "SparsePrefillWorkspace")


@dataclass(frozen=True)
class WorkspaceShape:
    """One published form of a patched method."""

    name: str
    class_name: str
    method: str
    source_sha256: str  # first 12 hex digits of the def's exact source text
    releases: str
    # code_sha256 of the method as CPython 3.10, 3.11, 3.12, 3.13 compile that text (it
    # changes with the minor version only); none: the source is needed (the generic rewrite)
    code_sha256: "tuple[str, ...]" = ()


def _shapes(class_name: str, method: str, *rows) -> "tuple[WorkspaceShape, ...]":
    """Rows of (name, source sha256, releases, code sha256 per CPython ...)."""
    return tuple(
        WorkspaceShape(name, class_name, method, source, releases, tuple(code))
        for name, source, releases, *code in rows
    )


KNOWN_SHAPES = _shapes(
    "SparsePrefillWorkspace", "get",
    ("workspace-get-bf16", "d521f0e4199e", "0.5.15-0.5.18",
     "b64061b4e6d9", "5b9fade88fc2", "43bafab7deed", "147d4f608767"),
    ("workspace-get-dtype", "6e444f7823ac", "0.5.19-0.5.22",
     "0912c84244b6", "3cb8b13f2108", "02a282a47edc", "3d94ba3a92c6"),
) + _shapes(
    "SparsePrefillKVBuffer", "_reserve",
    ("kv-buffer-reserve", "08fa9779e685", "0.5.23",
     "dae76ad0319a", "1b62c33967d7", "794386905f04", "473d06d0e8a5"),
)  # fmt: skip
# The same text in every release that has it (0.5.15 under sglang.srt.speculative.triton_ops,
# 0.5.16 on under sglang.kernels.ops).
FUSED_KV_SHAPES = _shapes(
    "FusedKVMaterializeHelper", "_ensure_workspace",
    ("fused-kv-ensure-workspace", "b8159246ef0b", "0.5.15-0.5.23",
     "72a2dea80493", "d4b114a43831", "0bef42aa2975", "5a9d83b2d489"),
)  # fmt: skip
# 0.5.22 on pass block verification to DSpark's kernel; 0.5.15-0.5.18 have no such method.
DRAFT_PROBS_SHAPES = _shapes(
    "DFlashWorkerV2", "_selector_sampling_accept",
    ("dflash-selector-accept", "811c71964eb7", "0.5.19-0.5.21",
     "a24cd54ebb9c", "8617ccd35ce5", "0e0c8550754f", "7e46bfbcc3a3"),
    ("dflash-selector-accept-block-verification", "a30377ccfd23", "0.5.22-0.5.23",
     "63ba76b01e4e", "6094f4da6b06", "4ed4b526aeca", "82cf1288ebf3"),
)  # fmt: skip
# The q8kv8 scratch of the flashmla_sparse_q8 prefills and the DSA born-fp8 q (opt-in
# SGLANG_ENABLE_DSA_Q8KV8_BORN_FP8_Q) with its NaN sentinel, all of the local-variable form
# (``buf = self.x; if ...: buf = torch.zeros(...); self.x = buf``): the generic rewrite drops
# the attribute and the local. DSA: 0.5.16 has the q pad only, 0.5.17 on the KV rows and
# outputs too; DSV4's from 0.5.19.
DSA_Q8KV8_SHAPES = _shapes(
    "DeepseekSparseAttnBackend", "_forward_flashmla_sparse_q8kv8",
    ("dsa-q8kv8-qpad", "169a7df46251", "0.5.16"),
    ("dsa-q8kv8-kv-out", "13f42ab64c02", "0.5.17-0.5.21"),
    ("dsa-q8kv8-kv-out-0.5.22", "f0c6ed52b57c", "0.5.22"),
    ("dsa-q8kv8-kv-out-0.5.23", "eb7abba41a0a", "0.5.23"),
)  # fmt: skip
DSV4_Q8KV8_SHAPES = _shapes(
    "DeepseekV4AttnBackend", "_prepare_q8kv8_q_and_sink",
    ("dsv4-q8kv8-qpad", "99b96398f867", "0.5.19-0.5.22"),
    ("dsv4-q8kv8-qpad-0.5.23", "891f31d3a954", "0.5.23"),
)  # fmt: skip
BORN_Q_SHAPES = _shapes(
    "DeepseekSparseAttnBackend", "q8kv8_acquire_born_q_buffer",
    ("dsa-q8kv8-born-q", "c9be682c090c", "0.5.17-0.5.23"),
)  # fmt: skip
BORN_Q_SENTINEL_SHAPES = _shapes(
    "DeepseekSparseAttnBackend", "q8kv8_born_q_sentinel",
    ("dsa-q8kv8-born-q-sentinel", "61428e17cdd3", "0.5.17-0.5.23"),
)  # fmt: skip


@dataclass(frozen=True)
class Site:
    """One method a patch replaces: the class (under any of its published names), the
    allocating method (the first of ``methods`` the class defines), the attributes a
    release-first method sets to None before allocating them anew, and the shapes the overlay
    knows. A patch of several methods is several sites with its id (``SITES``)."""

    patch_id: str
    class_names: "tuple[str, ...]"
    methods: "tuple[str, ...]"
    released: "tuple[str, ...]"
    shapes: "tuple[WorkspaceShape, ...]"
    hazard: "object" = None  # module -> a reason not to patch it, or None


def _address_keyed_validity(module) -> "str | None":
    # An unreleased upstream design (in no release) keys a per-forward gather cache on the
    # workspace's allocation address. Released first, a replacement may get the old address
    # back and a stale key would match, so that code needs the upstream change, not this one.
    gather = getattr(module, "CompressedGather", None)
    fields = getattr(gather, "__dataclass_fields__", {})
    if "dequantized_source" in fields:
        return (
            "CompressedGather.dequantized_source keys prefix validity on the workspace's "
            "allocation address; releasing first could let a replacement reuse that address "
            "and match a stale key"
        )
    return None


# fmt: off
DSA = ("DeepseekSparseAttnBackend",)
DSV4 = Site(PATCH_ID, WORKSPACE_CLASSES, ("_reserve", "get"), ("_buffer",), KNOWN_SHAPES,
            _address_keyed_validity)
FUSED_KV = Site(FUSED_KV_PATCH_ID, ("FusedKVMaterializeHelper",), ("_ensure_workspace",),
                ("_proj_workspace", "_k_workspace", "_v_workspace"), FUSED_KV_SHAPES)
DRAFT_PROBS = Site("0005-dflash-draft-probs-release-first", ("DFlashWorkerV2",),
                   ("_selector_sampling_accept",), ("_draft_probs_buf",), DRAFT_PROBS_SHAPES)
DSA_Q8KV8 = Site("0007-dsa-q8kv8-release-first", DSA, ("_forward_flashmla_sparse_q8kv8",),
                 ("_q8kv8_qpad_buf", "_q8kv8_kv_buf", "_q8kv8_out_bufs"), DSA_Q8KV8_SHAPES)
DSV4_Q8KV8 = Site("0009-dsv4-q8kv8-qpad-release-first", ("DeepseekV4AttnBackend",),
                  ("_prepare_q8kv8_q_and_sink",), ("_q8kv8_qpad_buf",), DSV4_Q8KV8_SHAPES)
BORN_Q = Site("0011-dsa-q8kv8-born-q-release-first", DSA, ("q8kv8_acquire_born_q_buffer",),
              ("_q8kv8_born_q_buf",), BORN_Q_SHAPES)
BORN_Q_SENTINEL = Site("0011-dsa-q8kv8-born-q-release-first", DSA, ("q8kv8_born_q_sentinel",),
                       ("_q8kv8_born_q_sentinel",), BORN_Q_SENTINEL_SHAPES)
# fmt: on
# Every site, in series order: a patch's method is a row here.
ALL_SITES = (DSV4, FUSED_KV, DRAFT_PROBS, DSA_Q8KV8, DSV4_Q8KV8, BORN_Q, BORN_Q_SENTINEL)
# patch id -> its sites, in the order they are recognised and reported
SITES = {
    patch_id: tuple(s for s in ALL_SITES if s.patch_id == patch_id)
    for patch_id in dict.fromkeys(s.patch_id for s in ALL_SITES)
}
