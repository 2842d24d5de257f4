"""The peak while the q8kv8 prefill scratch grows from 4,096 to 8,192 tokens, on the real
methods of whichever sglang is imported (the installed wheel with or without the overlay, or
a tree with fixes 0007/0009/0011 on PYTHONPATH).

DSA: DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8 at 16 local heads (padded to
64), head_dim 576 (512 + 64), v_head_dim 512, 4,096 KV tokens, top-k 128: the q pad (36 KiB
per token) and the outputs (64.5 KiB per token) grow; the Triton cast and the SM90 kernel are
stood in for by torch code that allocates nothing. DSV4: DeepseekV4AttnBackend.
_prepare_q8kv8_q_and_sink at 16 local heads x 512 (its cast is torch): the q pad (32 KiB per
token) grows. DSA born-fp8 q (fix 0011): DeepseekSparseAttnBackend.q8kv8_acquire_born_q_buffer
(16 local heads padded to 64 x 576 fp8, 36 KiB per token) and q8kv8_born_q_sentinel (16 x 512
bf16, 16 KiB per token), each grown alone. Backends are built without their constructors. CPU (default): torch profiler's
[memory] events, running sum of live bytes over both calls (inputs made before). ``cuda``:
torch.cuda.max_memory_allocated above what was allocated before the backend existed.
Prints one line per site. Usage: python measure.py [cpu|cuda]
"""

import sys
from unittest import mock

import torch
from sglang.kernels.ops.attention import sparse_mla_q8kv8_prefill_sm90 as sm90
from sglang.srt.layers.attention import deepseek_v4_backend as v4
from sglang.srt.layers.attention import dsa_backend as dsa
from torch.profiler import ProfilerActivity, profile

if sys.argv[1:] not in ([], ["cpu"], ["cuda"]):
    print("usage: python measure.py [cpu|cuda]", file=sys.stderr)
    sys.exit(2)
DEVICE = (sys.argv[1:] or ["cpu"])[0]
HEADS, SMALL, LARGE, KV, TOPK = 16, 4096, 8192, 4096, 128
M = float(1 << 20)


def cast(q_fp8, q_nope, q_rope, num_heads):
    q_fp8[:, :num_heads, :512].copy_(q_nope)
    q_fp8[:, :num_heads, 512:].copy_(q_rope)


def kernel(*, out, max_logits, lse, **kwargs):
    return out, max_logits, lse


def dsa_call(tokens):
    return dict(
        q_nope=torch.randn((tokens, HEADS, 512), dtype=torch.bfloat16, device=DEVICE),
        q_rope=torch.randn((tokens, HEADS, 64), dtype=torch.bfloat16, device=DEVICE),
        kv_bf16=torch.randn((KV, 1, 576), dtype=torch.bfloat16, device=DEVICE),
        v_head_dim=512,
        page_table_1=torch.randint(KV, (tokens, TOPK), dtype=torch.int32, device=DEVICE),
        sm_scale=1.0,
    )


def dsa_backend():
    b = dsa.DeepseekSparseAttnBackend.__new__(dsa.DeepseekSparseAttnBackend)
    for name in ("identity_scale", "qpad_buf", "topk_pad_buf", "topk_pad_width", "kv_buf",
                 "out_bufs", "born_q_stash"):  # fmt: skip
        setattr(b, f"_q8kv8_{name}", None)
    b._q8kv8_topk_length_enabled = b.dsa_kv_cache_store_fp8 = False
    return b


def dsa_scratch(b):
    return sum(t.nbytes for t in (b._q8kv8_qpad_buf, b._q8kv8_kv_buf, *b._q8kv8_out_bufs))


def born_backend():
    b = dsa.DeepseekSparseAttnBackend.__new__(dsa.DeepseekSparseAttnBackend)
    b._q8kv8_born_q_buf = b._q8kv8_born_q_sentinel = None
    return b


def v4_call(tokens):
    q = torch.randn((tokens, HEADS, 512), dtype=torch.bfloat16, device=DEVICE)
    return q, torch.randn(HEADS, device=DEVICE)


def peak_of(make, run, small, large, scratch):
    """(old scratch, new scratch, peak) in bytes over the grow."""
    backend = make()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        run(backend, small)
        old = scratch(backend)
        torch.cuda.reset_peak_memory_stats()
        run(backend, large)
        torch.cuda.synchronize()
        return old, scratch(backend), torch.cuda.max_memory_allocated() - base
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run(backend, small)
        old = scratch(backend)
        run(backend, large)
    live = peak = 0
    events = prof.profiler.kineto_results.events()
    for _, nbytes in sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"):
        live += nbytes
        peak = max(peak, live)
    return old, scratch(backend), peak


def report(what, old, new, peak):
    print(
        f"{DEVICE} {what}: {SMALL} -> {LARGE} tokens: old {old} B ({old / M:.1f} MiB), "
        f"new {new} B ({new / M:.1f} MiB), peak {peak} B ({peak / M:.1f} MiB), "
        f"peak/new {peak / new:.4f}"
    )


with mock.patch.object(dsa, "concat_and_cast_q_fp8_pad", cast), mock.patch.object(
    sm90, "sparse_mla_q8kv8_prefill_fwd", kernel
):
    report(
        f"DSA {dsa.__file__}",
        *peak_of(
            dsa_backend,
            lambda b, c: b._forward_flashmla_sparse_q8kv8(**c),
            dsa_call(SMALL),
            dsa_call(LARGE),
            dsa_scratch,
        ),
    )
report(
    f"DSA born-q buffer {dsa.__file__}",
    *peak_of(
        born_backend,
        lambda b, n: b.q8kv8_acquire_born_q_buffer(n, HEADS, 576, torch.device(DEVICE)),
        SMALL,
        LARGE,
        lambda b: b._q8kv8_born_q_buf.nbytes,
    ),
)
report(
    f"DSA born-q sentinel {dsa.__file__}",
    *peak_of(
        born_backend,
        lambda b, n: b.q8kv8_born_q_sentinel(n, HEADS, 512, torch.device(DEVICE)),
        SMALL,
        LARGE,
        lambda b: b._q8kv8_born_q_sentinel.nbytes,
    ),
)
report(
    f"DSV4 {v4.__file__}",
    *peak_of(
        lambda: v4.DeepseekV4AttnBackend.__new__(v4.DeepseekV4AttnBackend),
        lambda b, c: b._prepare_q8kv8_q_and_sink(*c),
        v4_call(SMALL),
        v4_call(LARGE),
        lambda b: b._q8kv8_qpad_buf.nbytes,
    ),
)
