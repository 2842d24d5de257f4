"""``python -m tools.benchmark.fused_kv``: the peak while the real DFlash
``FusedKVMaterializeHelper._ensure_workspace`` grows its three workspaces C -> 2C, in units of
the K workspace at C: sglang's method, the overlay's (0003), and sglang's with the old ones
dropped first (``released-first``: the limit)."""

import argparse
import json
import sys

import torch

from sglang_overlay import FUSED_KV_PATCH_ID
from tools.benchmark import live_bytes, overlay

# A DFlash draft shape (5 draft layers, 8 KV heads of 128, bf16); any shape gives the same units.
SHAPE = {"n_layers": 5, "num_kv_heads": 8, "head_dim": 128}
ORDERS = ("unmodified", "overlay", "released-first")


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


def grow(capacity: int, order: str, device="cpu") -> dict:
    """Grow a fresh helper to ``capacity`` tokens, then ask for one more token (the method
    doubles) with ``order``'s method: the sizes and the peak, in units."""
    ws, seen, dtype = helper(**SHAPE, device=device), {}, torch.bfloat16

    def work():
        ws._ensure_workspace(capacity, dtype)
        seen["old"] = sum(t.nbytes for t in (ws._proj_workspace, ws._k_workspace, ws._v_workspace))
        seen["unit"] = ws._k_workspace.nbytes
        if order == "released-first":
            ws._proj_workspace = ws._k_workspace = ws._v_workspace = None
        ws._ensure_workspace(capacity + 1, dtype)

    with overlay(order == "overlay", FUSED_KV_PATCH_ID):
        peak, final = live_bytes(work, device)
    unit = seen["unit"]
    return dict(
        order=order, capacity=[capacity, ws._workspace_capacity], unit_bytes=unit, peak_bytes=peak,
        old_total_units=seen["old"] / unit, new_total_units=final / unit, peak_units=peak / unit,
    )  # fmt: skip


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
    report = {"shape": SHAPE, "device": device, "torch": torch.__version__, "rows": rows}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
