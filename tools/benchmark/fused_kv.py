"""``python -m tools.benchmark.fused_kv``: the peak memory while sglang's speculative-decoding
``FusedKVMaterializeHelper._ensure_workspace`` grows its three workspaces, on the real method,
built without its constructor (only the fields the method reads are set). Three methods side by
side: ``unmodified`` (sglang's), ``overlay`` (patch 0003's) and ``released-first`` (sglang's
with the old workspaces dropped first: the physical limit), in units of the K workspace at the
old capacity. CPU: the running sum of torch's profiler memory events (as the CPU proof reads
them); CUDA: the caching allocator's peak above what was allocated before the growth.
"""

import argparse
import contextlib
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from tools.benchmark import launch

# A DFlash draft shape (5 draft layers, 8 KV heads of 128, bf16); any shape gives the same units.
SHAPE = {"n_layers": 5, "num_kv_heads": 8, "head_dim": 128}
ORDERS = ("unmodified", "overlay", "released-first")
PATCH = "0003-fused-kv-workspace-release-first"


def helper(n_layers: int, num_kv_heads: int, head_dim: int, device="cpu"):
    """A real ``FusedKVMaterializeHelper`` with only the fields ``_ensure_workspace`` reads."""
    from sglang.kernels.ops.speculative.fused_kv_materialize import FusedKVMaterializeHelper

    obj = FusedKVMaterializeHelper.__new__(FusedKVMaterializeHelper)
    obj.n_layers, obj.num_kv_heads, obj.head_dim = n_layers, num_kv_heads, head_dim
    obj.kv_size = num_kv_heads * head_dim
    obj.layer_out_dim = 2 * obj.kv_size
    obj.device = torch.device(device)
    obj._workspace_capacity, obj._workspace_dtype = 0, None
    obj._proj_workspace = obj._k_workspace = obj._v_workspace = None
    return obj


@contextlib.contextmanager
def method(order: str):
    """sglang's method (``unmodified``, ``released-first``) or the overlay's (``overlay``) on
    the class while the block runs; the overlay's state before it is put back after."""
    import sglang_overlay

    def fused_state():
        return next(r for r in sglang_overlay.status() if r["patch"] == PATCH)["state"]

    was_applied = fused_state() == "applied"
    if order == "overlay":
        sglang_overlay.apply()
        if fused_state() != "applied":
            raise RuntimeError(f"the overlay's {PATCH} is not applied here: {fused_state()}")
    elif was_applied:
        sglang_overlay.remove()
    try:
        yield
    finally:
        if was_applied and order != "overlay":
            sglang_overlay.apply()
        elif order == "overlay" and not was_applied:
            sglang_overlay.remove()


def running_peak(changes: "list[tuple[int, int]]") -> "tuple[int, int]":
    """(peak, final) of the running sum of (time, signed bytes) events, in time order."""
    live = peak = 0
    for _, nbytes in sorted(changes):
        live += nbytes
        peak = max(peak, live)
    return peak, live


def _grow_step(ws, capacity: int, order: str, dtype) -> None:
    if order == "released-first":
        ws._proj_workspace = ws._k_workspace = ws._v_workspace = None
    ws._ensure_workspace(capacity + 1, dtype)


def grow(capacity: int, order: str, dtype=torch.bfloat16, shape=None, device="cpu") -> dict:
    """Grow a fresh helper to ``capacity`` tokens, then ask for one more token (the method
    doubles) with ``order``'s method; the sizes and the peak in bytes and in units."""
    if device == "cuda":
        return _grow_cuda(capacity, order, dtype, shape or SHAPE)
    ws = helper(**(shape or SHAPE))
    with method(order), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        ws._ensure_workspace(capacity, dtype)
        old_total = _total(ws)
        unit = ws._k_workspace.nbytes
        _grow_step(ws, capacity, order, dtype)
    changes = [
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]"
    ]
    if not changes:
        raise RuntimeError("the profiler recorded no allocation")
    peak, final = running_peak(changes)
    return _row(order, capacity, ws, unit, old_total, final, peak)


def _grow_cuda(capacity: int, order: str, dtype, shape) -> dict:
    ws = helper(**shape, device="cuda")
    with method(order):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        ws._ensure_workspace(capacity, dtype)
        old_total, unit = _total(ws), ws._k_workspace.nbytes
        torch.cuda.reset_peak_memory_stats()
        _grow_step(ws, capacity, order, dtype)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        final = torch.cuda.memory_allocated() - base
    ws._proj_workspace = ws._k_workspace = ws._v_workspace = None
    return _row(order, capacity, ws, unit, old_total, final, peak)


def _total(ws) -> int:
    return sum(t.nbytes for t in (ws._proj_workspace, ws._k_workspace, ws._v_workspace))


def _row(order, capacity, ws, unit, old_total, final, peak) -> dict:
    return {
        "order": order,
        "capacity": [capacity, ws._workspace_capacity],
        "unit_bytes": unit,
        "old_total_units": old_total / unit,
        "new_total_units": final / unit,
        "peak_units": peak / unit,
        "peak_bytes": peak,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchmark.fused_kv", description=__doc__)
    parser.add_argument("--capacity", type=int, default=4096, help="tokens before the growth")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)
    if args.capacity < 1:
        parser.error("--capacity must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    rows = [grow(args.capacity, order, device=args.device) for order in ORDERS]
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    launch.hand_back({"shape": SHAPE, "device": device, "torch": torch.__version__, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
