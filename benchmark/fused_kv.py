"""``python -m benchmark.fused_kv``: the peak of live CPU memory when sglang's speculative-decoding
``FusedKVMaterializeHelper._ensure_workspace`` grows its three workspaces, on the real method.

The helper is built without its constructor (which needs a draft model's layers): only the
fields ``_ensure_workspace`` reads are set. torch's profiler (``profile_memory=True``) records
every CPU tensor allocation and release in order, as in the project's CPU proof; their running
sum is the live bytes. Two orders: ``unmodified`` (the method as sglang ships it: each new
workspace is allocated while the old one is still referenced) and ``released-first`` (the
three old workspaces dropped before the call: the physical limit, the new total). The unit is
the K workspace at the old capacity. Used by docs/grow-while-held-audit-0.5.23.md; the test is
tests/test_benchmark_fused_kv.py.
"""

import argparse
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

# A DFlash draft shape (5 draft layers, 8 KV heads of 128, bf16); any shape gives the same units.
SHAPE = {"n_layers": 5, "num_kv_heads": 8, "head_dim": 128}
ORDERS = ("unmodified", "released-first")


def helper(n_layers: int, num_kv_heads: int, head_dim: int):
    """A real ``FusedKVMaterializeHelper`` with only the fields ``_ensure_workspace`` reads."""
    from sglang.kernels.ops.speculative.fused_kv_materialize import FusedKVMaterializeHelper

    obj = FusedKVMaterializeHelper.__new__(FusedKVMaterializeHelper)
    obj.n_layers, obj.num_kv_heads, obj.head_dim = n_layers, num_kv_heads, head_dim
    obj.kv_size = num_kv_heads * head_dim
    obj.layer_out_dim = 2 * obj.kv_size
    obj.device = torch.device("cpu")
    obj._workspace_capacity, obj._workspace_dtype = 0, None
    obj._proj_workspace = obj._k_workspace = obj._v_workspace = None
    return obj


def running_peak(changes: "list[tuple[int, int]]") -> "tuple[int, int]":
    """(peak, final) of the running sum of (time, signed bytes) events, in time order."""
    live = peak = 0
    for _, nbytes in sorted(changes):
        live += nbytes
        peak = max(peak, live)
    return peak, live


def grow(capacity: int, order: str, dtype=torch.bfloat16, shape=None) -> dict:
    """Grow a fresh helper to ``capacity`` tokens, then ask for one more token (the method
    doubles), all under the profiler; the sizes and the peak in bytes and in units."""
    shape = shape or SHAPE
    ws = helper(**shape)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        ws._ensure_workspace(capacity, dtype)
        old_total = sum(t.nbytes for t in (ws._proj_workspace, ws._k_workspace, ws._v_workspace))
        unit = ws._k_workspace.nbytes
        if order == "released-first":
            ws._proj_workspace = ws._k_workspace = ws._v_workspace = None
        ws._ensure_workspace(capacity + 1, dtype)
    changes = [
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]"
    ]
    if not changes:
        raise RuntimeError("the profiler recorded no allocation")
    peak, final = running_peak(changes)
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
    parser = argparse.ArgumentParser(prog="python -m benchmark.fused_kv", description=__doc__)
    parser.add_argument("--capacity", type=int, default=4096, help="tokens before the growth")
    args = parser.parse_args(argv)
    if args.capacity < 1:
        parser.error("--capacity must be at least 1")
    rows = [grow(args.capacity, order) for order in ORDERS]
    json.dump({"shape": SHAPE, "rows": rows}, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
