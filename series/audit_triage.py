"""Triage of the ``grows-while-held`` sites that ``series audit`` finds: is a site worth fixing,
and why. ``READ`` holds the sites read by hand (sizes from the code, a measurement where one
decides it); ``RULES`` gives every other site a reason from facts of its own allocation (the file,
the method, the dtype the call names, what the size grows with). First match wins. Pure: sites
in, Markdown out (``python -m series audit TREE --triage``; docs/grow-while-held-audit-0.5.23.md).
"""

import re
from dataclasses import dataclass

WORTH = ("yes", "next", "measure", "no")  # the order of the published table
SMALL_TYPES = re.compile(r"torch\.(int8|int16|int32|int64|long|int|uint32|uint64|bool)$")


@dataclass(frozen=True)
class Call:
    worth: str  # one of WORTH
    reason: str


# (file, qualname) -> the call, for the sites read by hand in sglang 0.5.23.
READ = {
    (
        "sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py",
        "SparsePrefillKVBuffer._reserve",
    ): Call(
        "yes",
        "DSV4 sparse-prefill workspace, (num_tokens, 1, 512) rows, 1 KiB each in bf16, sized by "
        "the prefill batch's gathered history; 64 -> 96 MiB peaks at 160 MiB unmodified, 96 MiB "
        "released first (H200, README). Fixed by patches/0001.",
    ),
    (
        "sglang/kernels/ops/speculative/fused_kv_materialize.py",
        "FusedKVMaterializeHelper._ensure_workspace",
    ): Call(
        "yes",
        "DFlash fused KV materialisation: projection (capacity x layers x 2 kv_size), K and V "
        "(layers x capacity x kv heads x head dim) workspaces; capacity at least doubles. "
        "Measured on the real method (benchmark/fused_kv.py, CPU live bytes): C -> 2C peaks at "
        "9 units, new total 8 (1 unit = K at C). An exception here is caught by DFlashWorkerV2, "
        "which turns the fused path off for the rest of the process: a silent slowdown.",
    ),
    (
        "sglang/srt/layers/attention/dsa_backend.py",
        "DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8",
    ): Call(
        "next",
        "fp8 scratch grown to the exact request size (no doubling), so every larger batch "
        "replaces it: q pad (num_tokens x padded heads x head_dim) and KV rows "
        "((num_kv_tokens + topk) x head_dim), 1 byte each; at 64 heads x 576 that is 36 KiB "
        "per token: 8,192 tokens = 288 MiB, held twice during a grow.",
    ),
    (
        "sglang/srt/layers/attention/dsa_backend.py",
        "DeepseekSparseAttnBackend.q8kv8_acquire_born_q_buffer",
    ): Call(
        "next",
        "fp8 (num_tokens x padded heads x head_dim), exact-size growth: the same shape and "
        "size as the q pad above.",
    ),
    (
        "sglang/srt/layers/attention/dsa_backend.py",
        "DeepseekSparseAttnBackend.q8kv8_born_q_sentinel",
    ): Call("next", "grown with the born-q buffer above, same size per token."),
    (
        "sglang/srt/layers/attention/deepseek_v4_backend.py",
        "DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink",
    ): Call(
        "next",
        "DSV4's q pad: fp8 (num_tokens x padded heads x head_dim), exact-size growth like "
        "the DSA one (the sink pad and identity scale beside it are per-head, tiny).",
    ),
    ("sglang/kernels/ops/attention/verify_mla.py", "VerifyMLA._alloc"): Call(
        "measure",
        "split-KV partials (max_bs x h_q x 32 splits x l_pad x v_head_dim, bf16) regrown by "
        "grow_buffers only when max_bs rises: large per row, but rare after warm-up.",
    ),
    ("sglang/kernels/ops/attention/verify_splitkv.py", "VerifySplitKV._alloc"): Call(
        "measure",
        "split-KV partials (max_bs x h_q x n_splits x l_pad x v_head_dim, fp32), regrown only "
        "when max_bs rises, like VerifyMLA.",
    ),
    (
        "sglang/srt/layers/attention/xpu_backend.py",
        "XPUAttentionBackend.init_forward_metadata",
    ): Call(
        "measure",
        "FlashMLA decode/prefill byte workspaces grown when a batch needs more "
        "(flash_mla_*_get_workspace_size); the size is the kernel's, not visible here.",
    ),
    (
        "sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py",
        "SparsePrefillChunkCache.combine_compressed",
    ): Call(
        "no",
        "a false positive: combined_lens is built in the same 'combined_indices is None' block "
        "as combined_indices, so it holds nothing when replaced (int32 per token anyway).",
    ),
}

# (name, test on a site, worth, reason): for every site not read by hand.
RULES = (
    (
        "test code",
        lambda s: "/test/" in s.file,
        "no",
        "test code: not on a serving path.",
    ),
    (
        "graph set-up",
        lambda s: (
            s.qualname.rsplit(".", 1)[1]
            in {
                "init_cuda_graph_state",
                "init_cpu_graph_state",
                "create_graph",
                "_init_dsv4_graph_metadata",
                "_init_dsv4_graph_buffers",
            }
        ),
        "no",
        "graph set-up: sized once for the capture maximum (max_bs, max_num_tokens) when a graph "
        "runner is built (decode_cuda_graph_runner.py calls init_cuda_graph_state from its "
        "constructor), before serving.",
    ),
    (
        "index metadata",
        lambda s: bool(SMALL_TYPES.search(s.dtype)),
        "no",
        "integer or bool metadata ({dtype}): at most 8 bytes per element, so old + new is small "
        "next to the activations of the same batch.",
    ),
    (
        "no request dimension",
        lambda s: not s.grows_with,
        "no",
        "its size names no token, context, batch or capacity dimension: fixed by the model or "
        "configuration, replaced rarely.",
    ),
    (
        "set-up by name",
        lambda s: (
            re.match(
                r"(_?init|_?create|_?setup|load|_?build|_?initialize|preprocess|_finalize)",
                s.qualname.rsplit(".", 1)[1],
            )
            and not s.qualname.endswith("init_forward_metadata")
        ),
        "no",
        "set-up by its name ({method}): built when the model, pool or worker is created, not per "
        "request (by name, not read).",
    ),
)


def triage(site) -> "tuple[Call, str]":
    """The call on one grows-while-held site, and where it came from ("read" or a rule)."""
    read = READ.get((site.file, site.qualname))
    if read:
        return read, "read"
    for name, test, worth, reason in RULES:
        if test(site):
            method = site.qualname.rsplit(".", 1)[1]
            return Call(worth, reason.format(dtype=site.dtype, method=method)), name
    return (
        Call(
            "measure",
            "a floating-point or byte buffer sized by {} and not read yet: needs its sizes from "
            "the code before a call.".format(", ".join(site.grows_with)),
        ),
        "unread",
    )


def render(sites) -> str:
    """The triage table of every grows-while-held site, the worth-fixing ones first."""
    held = [s for s in sites if s.verdict == "grows-while-held"]
    rows = sorted(
        ((s, *triage(s)) for s in held),
        key=lambda r: (WORTH.index(r[1].worth), r[0].file, r[0].line),
    )
    counts = {w: sum(r[1].worth == w for r in rows) for w in WORTH}
    out = [
        f"{len(held)} grows-while-held sites: "
        + ", ".join(f"{n} {w}" for w, n in counts.items())
        + ".",
        "",
        "| worth fixing | file:line | method | target | grows with | dtype | from | why |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for site, call, source in rows:
        out.append(
            f"| {call.worth} | {site.file}:{site.line} | `{site.qualname}` | `{site.target}` | "
            f"{', '.join(site.grows_with) or '-'} | {site.dtype or '-'} | {source} | "
            f"{call.reason} |"
        )
    return "\n".join(out) + "\n"
