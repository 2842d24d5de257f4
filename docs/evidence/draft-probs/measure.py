"""The peak while DFlashWorkerV2._selector_sampling_accept grows its dense draft-probability
buffer from 64 to 128 requests at gamma 15 and a 151,936-token vocabulary, on the real method
of whichever sglang is imported (the installed wheel, or a tree with fix 0005 on PYTHONPATH).

The worker is built without its constructor and DSpark's accept kernel is stood in for, so the
peak is the buffer's. CPU (default): torch profiler's [memory] events, running sum of live
bytes over both calls. ``cuda``: torch.cuda.max_memory_allocated above what was allocated
before the worker existed. Prints one line. Usage: python measure.py [cpu|cuda]
"""

import sys
from unittest import mock

import torch
from sglang.srt.speculative import dflash_worker_v2 as m
from torch.profiler import ProfilerActivity, profile

if sys.argv[1:] not in ([], ["cpu"], ["cuda"]):
    print("usage: python measure.py [cpu|cuda]", file=sys.stderr)
    sys.exit(2)
DEVICE = (sys.argv[1:] or ["cpu"])[0]
GAMMA, VOCAB, TOP_K = 15, 151936, 8
G = 1 << 30


def step(bs):
    return {
        "candidates": torch.zeros((bs, GAMMA + 1), dtype=torch.int64, device=DEVICE),
        "next_token_logits": torch.zeros((1, VOCAB), device=DEVICE),
        "candidate_ids": torch.randint(VOCAB, (bs, GAMMA, TOP_K), device=DEVICE),
        "q_rows": torch.rand((bs, GAMMA, TOP_K), device=DEVICE),
        "sampling_info": None,
        "draft_input": None,
    }


def accept(*, draft_probs, **kwargs):
    zeros = draft_probs.new_zeros(draft_probs.shape[0])
    return zeros, zeros, None


worker = m.DFlashWorkerV2.__new__(m.DFlashWorkerV2)
worker._draft_probs_buf, worker._block_verification = None, False
small, large = step(64), step(128)
with mock.patch.object(m, "accept_sampling", accept):
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        worker._selector_sampling_accept(**small)
        old = worker._draft_probs_buf.nbytes
        torch.cuda.reset_peak_memory_stats()
        worker._selector_sampling_accept(**large)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            worker._selector_sampling_accept(**small)
            old = worker._draft_probs_buf.nbytes
            worker._selector_sampling_accept(**large)
        live = peak = 0
        events = prof.profiler.kineto_results.events()
        for _, nbytes in sorted(
            (e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"
        ):
            live += nbytes
            peak = max(peak, live)
new = worker._draft_probs_buf.nbytes
print(
    f"{DEVICE} {m.__file__}: 64 -> 128 requests, gamma {GAMMA}, vocab {VOCAB}: "
    f"old {old} B ({old / G:.3f} GiB), new {new} B ({new / G:.3f} GiB), "
    f"peak {peak} B ({peak / G:.3f} GiB), peak/new {peak / new:.4f}"
)
