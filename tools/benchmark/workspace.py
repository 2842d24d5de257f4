"""Parts on sglang's real DSV4 workspace class in this process, unmodified against the overlay:
``peaks``, a replacement's peak over its new size (``live_bytes``); ``hot``, calls per second of
the reuse path (``get``, ``get_with_head``), the two methods alternated, bound as the engine
calls them."""

import importlib
import timeit

from sglang_overlay import PATCH_ID, WORKSPACE_MODULE
from sglang_overlay.shapes import workspace_class
from tools.benchmark import live_bytes, overlay, summary

MIB = 1 << 20
BF16, FP8 = "bfloat16", "float8_e4m3fn"
DTYPE_BYTES = {BF16: 2, FP8: 1}
# name -> (old, new): (rows, dtype) requests, a row (num_tokens, 1, 512). The regression test's
# three (all that ``--quick`` runs), then more, then those too large for a small CPU machine.
TRANSITIONS = {
    "grow_bf16_64_to_96_mib": ((65536, BF16), (98304, BF16)),
    "replace_fp8_48_with_bf16_96_mib": ((98304, FP8), (98304, BF16)),
    "shrink_by_dtype_bf16_96_to_fp8_48_mib": ((98304, BF16), (98304, FP8)),
}
SWEEP = {
    "grow_bf16_16_to_96_mib": ((16384, BF16), (98304, BF16)),
    "replace_bf16_32_with_fp8_64_mib": ((32768, BF16), (131072, FP8)),
}
SWEEP_CUDA_ONLY = {
    "grow_bf16_96_to_128_mib": ((98304, BF16), (131072, BF16)),
    "grow_bf16_512_to_768_mib": ((524288, BF16), (786432, BF16)),
    "replace_fp8_256_with_bf16_512_mib": ((524288, FP8), (524288, BF16)),
}
REUSE_ROWS = 4096  # requests that fit the buffer: the hot path


def _workspace(device: str):
    """A fresh workspace of the class this sglang has."""
    import torch

    return workspace_class(importlib.import_module(WORKSPACE_MODULE))(torch.device(device))


def peak_mib(steps, device: str, change: bool) -> float:
    """The peak of the requests ``steps`` on a fresh workspace, each view dropped at once."""
    import torch

    def work():
        workspace = _workspace(device)
        for rows, dtype in steps:
            workspace.get(rows, getattr(torch, dtype))

    with overlay(change, PATCH_ID):
        return live_bytes(work, device)[0] / MIB


def peaks(device: str, quick: bool = False) -> dict:
    cases = dict(TRANSITIONS)
    if not quick:
        cases |= SWEEP | (SWEEP_CUDA_ONLY if device == "cuda" else {})
    out = {}
    for name, (old_step, new_step) in cases.items():
        old, new = (rows * 512 * DTYPE_BYTES[dtype] / MIB for rows, dtype in (old_step, new_step))
        # The floor: the new buffer, or the old one when larger (it is held before the request).
        out[name] = row = {"old_mib": old, "new_mib": new, "limit_ratio": max(old, new) / new}
        for mode, change in (("unmodified", False), ("change", True)):
            peak = peak_mib((old_step, new_step), device, change)
            row[mode] = {"peak_mib": peak, "ratio": peak / new}
    method = "torch.cuda.max_memory_allocated" if device == "cuda" else "torch profiler live bytes"
    return {"device": device, "method": method + ", in one process", "transitions": out}


def hot_path(device: str, quick: bool = False) -> dict:
    rounds, number = (5, 2000) if quick else (21, 20000)
    with overlay(True, PATCH_ID):
        workspace = _workspace(device)
        workspace.get(2 * REUSE_ROWS)  # allocate once; every timed call reuses
        cls = type(workspace)
        calls = {"get": lambda: workspace.get(REUSE_ROWS)}
        if hasattr(cls, "get_with_head"):
            key = ("cache", 1, "indices", 2)
            calls["get_with_head"] = lambda: workspace.get_with_head(REUSE_ROWS, key)
        results = {name: _rates(cls, call, rounds, number) for name, call in calls.items()}
    found = {"device": device, "class": cls.__name__, "rounds": rounds, "calls_per_round": number}
    return found | {"results": results}


def _rates(cls, call, rounds: int, number: int) -> dict:
    """``call``'s calls per second with sglang's method and the overlay's, alternated."""
    method = "_reserve" if "_reserve" in vars(cls) else "get"
    variants = {"overlay": vars(cls)[method]}
    variants["original"] = variants["overlay"].__wrapped__
    rates = {"original": [], "overlay": []}
    try:
        for r in range(rounds):
            for label in ("overlay", "original") if r % 2 else ("original", "overlay"):
                setattr(cls, method, variants[label])
                rates[label].append(number / timeit.timeit(call, number=number))
    finally:
        setattr(cls, method, variants["overlay"])
    ratios = [o / a for o, a in zip(rates["overlay"], rates["original"], strict=True)]
    found = {"ratio_overlay_over_original": summary(ratios), "goal": ">= 0.98"}
    return found | {f"{k}_calls_per_s": summary(v) for k, v in rates.items()}
