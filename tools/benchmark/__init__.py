"""Benchmarks: every figure compares sglang unmodified with the change, measured side by side in
one run (A B A B where time is measured)."""

import contextlib
import itertools
import statistics


def summary(values) -> dict:
    return dict(median=statistics.median(values), min=min(values), max=max(values), n=len(values))


@contextlib.contextmanager
def overlay(on: bool, patch: str):
    """The overlay's methods (``on``: ``patch`` must apply) or sglang's own while the block runs;
    the state before is put back after."""
    import sglang_overlay

    def applied() -> bool:
        return next(r for r in sglang_overlay.status() if r["patch"] == patch)["state"] == "applied"

    was = applied()
    if on:
        sglang_overlay.apply()
        if not applied():
            raise RuntimeError(f"the overlay's {patch} is not applied here")
    elif was:
        sglang_overlay.remove()
    try:
        yield
    finally:
        if was != on:
            (sglang_overlay.apply if was else sglang_overlay.remove)()


def live_bytes(work, device: str) -> tuple:
    """(peak, final) bytes live while ``work()`` runs, above what was live before: CUDA, the
    caching allocator's figures; CPU, the running sum of torch's profiler memory events."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        work()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        work()
    events = prof.profiler.kineto_results.events()
    changes = [(e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"]
    if not changes:
        raise RuntimeError("the profiler recorded no allocation")
    live = list(itertools.accumulate(nbytes for _, nbytes in sorted(changes)))  # in time order
    return max(0, *live), live[-1]
