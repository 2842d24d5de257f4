"""``python overlay_patch_probe.py grow|lifecycle``: one JSON line of every patch's observations."""

import functools
import importlib
import json
import sys
import threading
import weakref
from contextlib import contextmanager

import torch

from sglang_overlay import PATCH_IDS, PATCHED_MODULES
from sglang_overlay.shapes import SITES

# patch -> (module, class, the methods it replaces), from the overlay's own table
PATCHES = {
    p: (PATCHED_MODULES[p][0], SITES[p][0].class_names[0], tuple(s.methods[0] for s in SITES[p]))
    for p in PATCH_IDS[2:]
}
FP8 = torch.float8_e4m3fn
BORN_Q = "0011-dsa-q8kv8-born-q-release-first"


def marks(patch: str) -> list:
    """The overlay's mark on each method ``patch`` replaces (None: sglang's own)."""
    module, cls, methods = PATCHES[patch]
    found = vars(getattr(sys.modules[module], cls))
    return [getattr(found[m], "__sglang_overlay_patch__", None) for m in methods]


def import_all() -> None:
    for module, _, _ in PATCHES.values():
        importlib.import_module(module)


@contextmanager
def watching(**held):
    """At each ``torch.<allocator>`` call, whether any of ``held``'s tensors is alive."""
    seen, real = [], {}
    refs = {name: [weakref.ref(t) for t in tensors] for name, tensors in held.items()}
    del held
    for name, olds in refs.items():
        real[name] = getattr(torch, name)

        def watch(*args, _real=real[name], _olds=olds, **kwargs):
            seen.append(any(r() is not None for r in _olds))
            return _real(*args, **kwargs)

        setattr(torch, name, watch)
    try:
        yield seen
    finally:
        for name, allocate in real.items():
            setattr(torch, name, allocate)


def grow_0005(m) -> dict:
    def step(bs):
        return dict(
            candidates=torch.zeros((bs, 4), dtype=torch.int64),
            next_token_logits=torch.zeros((1, 32)),
            candidate_ids=torch.arange(bs * 3 * 2).view(bs, 3, 2).remainder(32),
            q_rows=torch.full((bs, 3, 2), 0.5),
            sampling_info=None,
            draft_input=None,
        )

    w = m.DFlashWorkerV2.__new__(m.DFlashWorkerV2)
    w._draft_probs_buf, w._block_verification = None, False
    w._selector_sampling_accept(**step(2))
    larger = step(3)
    with watching(zeros=[w._draft_probs_buf]) as seen:
        w._selector_sampling_accept(**larger)
    buf = w._draft_probs_buf
    return {"old_alive": seen, "rows": buf.shape[0], "exact": not torch.count_nonzero(buf)}


def grow_0007(m) -> dict:
    from sglang.kernels.ops.attention import sparse_mla_q8kv8_prefill_sm90 as kernel

    def call(tokens):
        g = torch.Generator().manual_seed(tokens)
        return dict(
            q_nope=torch.randn((tokens, 16, 16), generator=g).to(torch.bfloat16),
            q_rope=torch.randn((tokens, 16, 8), generator=g).to(torch.bfloat16),
            kv_bf16=torch.randn((32, 1, 24), generator=g).to(torch.bfloat16),
            v_head_dim=16,
            page_table_1=torch.randint(32, (tokens, 128), generator=g, dtype=torch.int32),
            sm_scale=1.0,
        )

    b = m.DeepseekSparseAttnBackend.__new__(m.DeepseekSparseAttnBackend)
    for name in ("identity_scale", "qpad_buf", "topk_pad_buf", "topk_pad_width", "kv_buf",
                 "out_bufs", "born_q_stash"):  # fmt: skip
        setattr(b, f"_q8kv8_{name}", None)
    b._q8kv8_topk_length_enabled = b.dsa_kv_cache_store_fp8 = False
    b._forward_flashmla_sparse_q8kv8(**call(8))
    b._q8kv8_qpad_buf.fill_(1.0)  # rows a grow must not carry over
    larger = call(12)
    with watching(zeros=[b._q8kv8_qpad_buf], empty=[b._q8kv8_out_bufs[0]]) as seen:
        b._forward_flashmla_sparse_q8kv8(**larger)
    want = torch.zeros((12, 64, 24), dtype=FP8)
    want[:, :16, :16].copy_(larger["q_nope"])
    want[:, :16, 16:].copy_(larger["q_rope"])
    exact = torch.equal(kernel.LAST_Q[0].float(), want.float())
    return {"old_alive": seen, "rows": b._q8kv8_qpad_buf.shape[0], "exact": exact}


def grow_0009(m) -> dict:
    def call(n):
        return torch.randn((n, 16, 512)).to(torch.bfloat16), torch.randn(16)

    b = m.DeepseekV4AttnBackend.__new__(m.DeepseekV4AttnBackend)
    b._prepare_q8kv8_q_and_sink(*call(8))
    b._q8kv8_qpad_buf.fill_(1.0)
    q, sink = call(12)
    with watching(empty=[b._q8kv8_qpad_buf]) as seen:
        q_fp8 = b._prepare_q8kv8_q_and_sink(q, sink)[0]
    want = torch.zeros((12, 64, 512), dtype=FP8)
    want[:, :16].copy_(q)
    exact = torch.equal(q_fp8.float(), want.float())
    return {"old_alive": seen, "rows": b._q8kv8_qpad_buf.shape[0], "exact": exact}


def grow_0011(m) -> dict:
    cpu = torch.device("cpu")
    b = m.DeepseekSparseAttnBackend.__new__(m.DeepseekSparseAttnBackend)
    b._q8kv8_born_q_buf = b._q8kv8_born_q_sentinel = None
    b.q8kv8_acquire_born_q_buffer(8, 16, 24, cpu).fill_(1.0)
    b.q8kv8_born_q_sentinel(8, 16, 16, cpu).fill_(1.0)
    with watching(zeros=[b._q8kv8_born_q_buf], full=[b._q8kv8_born_q_sentinel]) as seen:
        q_fp8 = b.q8kv8_acquire_born_q_buffer(12, 16, 24, cpu)
        q_stand_in = b.q8kv8_born_q_sentinel(12, 16, 16, cpu)
    exact = not torch.count_nonzero(q_fp8.float()) and bool(torch.isnan(q_stand_in).all())
    return {"old_alive": seen, "rows": b._q8kv8_born_q_buf.shape[0], "exact": exact}


GROW = {
    "0005-dflash-draft-probs-release-first": grow_0005,
    "0007-dsa-q8kv8-release-first": grow_0007,
    "0009-dsv4-q8kv8-qpad-release-first": grow_0009,
    "0011-dsa-q8kv8-born-q-release-first": grow_0011,
}


def grow() -> dict:
    import sglang_overlay

    import_all()
    out = {p: GROW[p](sys.modules[module]) for p, (module, _, _) in PATCHES.items()}
    rows = {r["patch"]: r for r in sglang_overlay.status()}
    logs = sys.modules.get("sglang_overlay.release_first")  # imported once a patch applied
    for patch, seen in out.items():
        row = rows.get(patch, {"state": "no such patch", "reason": ""})
        seen.update(
            state=row["state"],
            reason=row["reason"],
            others=[r["state"] for p, r in rows.items() if p != patch],
            marks=marks(patch),
            high_water=logs.LOGS[patch].high_water_bytes if logs else 0,
        )
    return out


def lifecycle() -> dict:
    """Threads racing the first import, then a reload of each module, then a spawned child."""
    import sglang_overlay
    from sglang_overlay import overlay

    barrier = threading.Barrier(8)

    def go():
        barrier.wait()
        import_all()

    started = [threading.Thread(target=go) for _ in range(8)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    out = {
        p: {"threads": [sum(a.patch_id == p for a in overlay._applied), marks(p)]} for p in PATCHES
    }

    first = {p: getattr(sys.modules[m], c) for p, (m, c, _) in PATCHES.items()}
    for module in dict.fromkeys(m for m, _, _ in PATCHES.values()):
        importlib.reload(sys.modules[module])
    states = {r["patch"]: r["state"] for r in sglang_overlay.status()}
    for p, (m, c, _) in PATCHES.items():
        out[p]["reload"] = [getattr(sys.modules[m], c) is first[p], states.get(p), marks(p)]

    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    got = queue.get(timeout=120)
    process.join(120)
    for p in PATCHES:
        out[p]["spawn"] = [got[p], process.exitcode]

    # another plugin's AROUND or REPLACE hook over 0011's second method, then remove()
    module, cls, methods = PATCHES[BORN_Q]
    owner = getattr(sys.modules[module], cls)
    ours = vars(owner)[methods[1]]

    @functools.wraps(ours)
    def around(self, *args, **kwargs):
        return ours(self, *args, **kwargs)

    def replacing(self, *args, **kwargs):
        return None

    replacing.__wrapped__ = ours
    seen = {p: [] for p in PATCHES}
    for hook in (around, replacing):
        setattr(owner, methods[1], hook)
        for record in sglang_overlay.status():
            seen.get(record["patch"], []).append(record["state"])
    for record in sglang_overlay.remove():
        seen.get(record["patch"], []).append(record["state"])
    for p in PATCHES:
        out[p]["hooks"] = [seen[p], marks(p)]
    return out


def child(queue) -> None:
    import_all()
    queue.put({p: marks(p) for p in PATCHES})


if __name__ == "__main__":
    observe = {"grow": grow, "lifecycle": lifecycle}
    print(json.dumps(observe[sys.argv[1]]()))
