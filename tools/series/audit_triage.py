"""Triage of the ``grows-while-held`` sites that ``series audit`` finds: is a site worth fixing,
and why. ``READ`` holds the sites read by hand (sizes from the code, a measurement where one
decides it); ``RULES`` gives every other site a reason from facts of its own allocation (the file,
the method, the dtype the call names, what the size grows with). First match wins. Pure: sites
in, Markdown out (``python -m tools.series audit TREE --triage``; docs/grow-while-held-audit-0.5.23.md).
"""

import re
from dataclasses import dataclass

WORTH = ("yes", "next", "measure", "no")  # the order of the published table
SMALL_TYPES = re.compile(r"torch\.(int8|int16|int32|int64|long|int|uint32|uint64|bool)$")


@dataclass(frozen=True)
class Call:
    worth: str  # one of WORTH
    reason: str


@dataclass(frozen=True)
class Read:
    """A site read by hand: the module under sglang/, the method, the target (None: every
    target of that method), and the call."""

    module: str
    qualname: str
    target: "str | None"
    call: Call


DSA = "srt/layers/attention/dsa_backend.py"
DFLASH = "srt/speculative/dflash_worker_v2.py"
# The sites read by hand in sglang 0.5.23.
READ = (
    Read(
        "srt/layers/attention/dsv4/sparse_prefill_utils.py",
        "SparsePrefillKVBuffer._reserve",
        None,
        Call(
            "yes",
            "DSV4 sparse-prefill workspace, (num_tokens, 1, 512) rows, 1 KiB each in bf16, sized "
            "by the prefill batch's gathered history; 64 -> 96 MiB peaks at 160 MiB unmodified, "
            "96 MiB released first (H200, README). Fixed by patches/0001.",
        ),
    ),
    Read(
        "kernels/ops/speculative/fused_kv_materialize.py",
        "FusedKVMaterializeHelper._ensure_workspace",
        None,
        Call(
            "yes",
            "DFlash fused KV materialisation: projection (capacity x layers x 2 kv_size), K and "
            "V (layers x capacity x kv heads x head dim) workspaces; capacity at least doubles. "
            "Measured on the real method (tools/benchmark/fused_kv.py, CPU live bytes): C -> 2C peaks "
            "at 9 units, new total 8 (1 unit = K at C). An exception here is caught by "
            "DFlashWorkerV2, which turns the fused path off for the rest of the process: a "
            "silent slowdown.",
        ),
    ),
    Read(
        DSA,
        "DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8",
        "self._q8kv8_qpad_buf",
        Call(
            "next",
            "fp8 q pad (num_tokens x 64 x head_dim) grown to the exact token count: at head_dim "
            "576 (512 + 64 rope) 36 KiB per token, 8,192 tokens = 288 MiB, held twice.",
        ),
    ),
    Read(
        DSA,
        "DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8",
        "self._q8kv8_kv_buf",
        Call(
            "next",
            "fp8 KV rows ((num_kv_tokens + topk) x head_dim, 1 byte each) grown to the exact "
            "request size (no doubling), so every larger batch replaces it: 576 B per KV token, "
            "131,072 tokens = 72 MiB, held twice during a grow.",
        ),
    ),
    Read(
        DSA,
        "DeepseekSparseAttnBackend.q8kv8_acquire_born_q_buffer",
        None,
        Call(
            "next",
            "fp8 q (num_tokens x padded heads x head_dim) grown to the exact size: at 64 heads "
            "x 576 that is 36 KiB per token, 8,192 tokens = 288 MiB, held twice during a grow.",
        ),
    ),
    Read(
        DSA,
        "DeepseekSparseAttnBackend.q8kv8_born_q_sentinel",
        None,
        Call("next", "bf16, grown with the born-q buffer above, per token like it."),
    ),
    Read(
        DSA,
        "DeepseekSparseAttnBackend._pad_topk_width_buffered",
        None,
        Call("no", "top-k index padding (rows x padded width) in the indices' integer dtype."),
    ),
    Read(
        "srt/layers/attention/deepseek_v4_backend.py",
        "DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink",
        "self._q8kv8_qpad_buf",
        Call(
            "next",
            "DSV4's fp8 q pad (num_tokens x padded heads x head_dim), exact-size growth like "
            "the DSA born-q buffer.",
        ),
    ),
    Read(
        "srt/layers/attention/deepseek_v4_backend.py",
        "DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink",
        None,
        Call("no", "per-head float32 vectors (padded heads): tiny."),
    ),
    Read(
        DFLASH,
        "DFlashWorkerV2._selector_sampling_accept",
        None,
        Call(
            "next",
            "dense float32 draft probabilities (cap x gamma x vocab), cap doubling with the "
            "batch: gamma 15 and a 151,936-token vocabulary make 8.7 MiB per request, so growing "
            "64 -> 128 requests needs 1.63 GiB at once where the new buffer alone is 1.09 GiB.",
        ),
    ),
    Read(
        DFLASH,
        "DFlashWorkerV2._greedy_sample_from_vocab_parallel_head",
        None,
        Call("no", "one scalar per rank and chunk row (tp_size x chunk_size): tiny."),
    ),
    Read(
        "kernels/ops/attention/verify_mla.py",
        "VerifyMLA._alloc",
        None,
        Call(
            "measure",
            "split-KV partials (max_bs x h_q x 32 splits x l_pad x v_head_dim, bf16) regrown "
            "by grow_buffers only when max_bs rises: large per row, rare after warm-up.",
        ),
    ),
    Read(
        "kernels/ops/attention/verify_splitkv.py",
        "VerifySplitKV._alloc",
        None,
        Call(
            "measure",
            "split-KV partials (max_bs x h_q x n_splits x l_pad x v_head_dim, fp32), regrown "
            "only when max_bs rises, like VerifyMLA.",
        ),
    ),
    Read(
        "srt/layers/attention/xpu_backend.py",
        "XPUAttentionBackend.init_forward_metadata",
        None,
        Call(
            "measure",
            "FlashMLA decode/prefill byte workspaces grown when a batch needs more "
            "(flash_mla_*_get_workspace_size); the size is the kernel's, not visible here.",
        ),
    ),
    Read(
        "srt/layers/attention/xpu_backend.py",
        "XPUAttentionBackend.init_forward_metadata",
        "self.strided_indices",
        Call("no", "an int64 arange over the page-table width: small."),
    ),
    Read(
        "srt/layers/attention/deepseek_v4_backend.py",
        "DSV4AttnMetadata.init_flashmla_related",
        None,
        Call(
            "no",
            "per-batch metadata object, called once per object; int32 page indices "
            "(and an empty_like of them).",
        ),
    ),
    Read(
        "srt/layers/attention/deepseek_v4_backend_hip_radix.py",
        "DSV4AttnMetadata.init_flashmla_related",
        None,
        Call(
            "no",
            "per-batch metadata object, called once per object; copies (empty_like/full_like) "
            "of int32 page indices.",
        ),
    ),
    Read(
        "srt/layers/attention/intel_amx_backend.py",
        "IntelAMXAttnBackend._get_attn_logits_buffer",
        None,
        Call(
            "measure",
            "CPU backend, float32 (num_seqs x heads x kv splits x (v_head_dim + 1)), grown to "
            "the exact number of sequences: host memory, modest per sequence.",
        ),
    ),
    Read(
        "srt/managers/overlap_utils.py",
        "ConfidenceRelay._lazy_init",
        None,
        Call(
            "no",
            "built once: its one caller (scatter) calls it while 'initialized' is False, and it "
            "sets that first; sized by the request pool.",
        ),
    ),
    Read(
        "srt/sampling/watermarking/core.py",
        "WatermarkState._ensure_selection_buffers",
        None,
        Call("no", "batch x vocabulary-split float32 partial scores: small per request."),
    ),
    Read(
        "srt/layers/attention/dsv4/sparse_prefill_utils.py",
        "SparsePrefillChunkCache.combine_compressed",
        None,
        Call(
            "no",
            "a false positive: combined_lens is built in the same 'combined_indices is None' "
            "block as combined_indices, so it holds nothing when replaced (int32 anyway).",
        ),
    ),
)

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
        lambda s: (
            bool(SMALL_TYPES.search(s.dtype)) or (s.allocator == "torch.arange" and not s.dtype)
        ),
        "no",
        "integer or bool metadata ({dtype}): at most 8 bytes per element, index or length "
        "tensors per request or token, small next to the KV and activations of the same batch "
        "(by dtype, not read one by one).",
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
    for target in (site.target, None):  # a call on the target before one on the method
        for read in READ:
            same = (f"sglang/{read.module}", read.qualname) == (site.file, site.qualname)
            if same and read.target == target:
                return read.call, "read"
    for name, test, worth, reason in RULES:
        if test(site):
            method = site.qualname.rsplit(".", 1)[1]
            arange = site.allocator == "torch.arange"
            dtype = site.dtype or ("torch.int64, arange's default" if arange else "-")
            return Call(worth, reason.format(dtype=dtype, method=method)), name
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
