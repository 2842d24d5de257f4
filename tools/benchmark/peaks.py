"""The ``peaks`` part: a replacement's peak over its new size on sglang's real DSV4 workspace
class, unmodified and with the overlay, in this process (``live_bytes``)."""

import importlib
import inspect

from sglang_overlay import WORKSPACE_MODULE
from sglang_overlay.shapes import workspace_class
from tools.benchmark import BenchmarkError, live_bytes, overlay

MIB = 1 << 20
PATCH = "0001-dsv4-sparse-prefill-release-first"
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


def step_mib(step) -> float:
    return step[0] * 512 * DTYPE_BYTES[step[1]] / MIB


def peak_mib(steps, device: str, change: bool) -> float:
    """The peak of the requests ``steps`` on a fresh workspace, each view dropped at once."""
    import torch

    cls = workspace_class(importlib.import_module(WORKSPACE_MODULE))
    if cls is None:
        raise BenchmarkError(f"{WORKSPACE_MODULE} has no workspace class")
    takes_dtype = "dtype" in inspect.signature(cls.get).parameters
    if not takes_dtype and any(dtype != BF16 for _, dtype in steps):
        raise BenchmarkError(f"{cls.__name__}.get has no dtype parameter")

    def work():
        workspace = cls(torch.device(device))
        for rows, dtype in steps:
            workspace.get(*((rows, getattr(torch, dtype)) if takes_dtype else (rows,)))

    with overlay(change, PATCH):
        return live_bytes(work, device)[0] / MIB


def peaks(device: str, quick: bool = False) -> dict:
    cases = dict(TRANSITIONS)
    if not quick:
        cases |= SWEEP | (SWEEP_CUDA_ONLY if device == "cuda" else {})
    out = {}
    for name, steps in cases.items():
        old, new = step_mib(steps[0]), step_mib(steps[1])
        # The floor: the new buffer, or the old one when larger (it is held before the request).
        out[name] = row = {"old_mib": old, "new_mib": new, "limit_ratio": max(old, new) / new}
        for mode, change in (("unmodified", False), ("change", True)):
            peak = peak_mib(steps, device, change)
            row[mode] = {"peak_mib": peak, "ratio": peak / new}
    method = "torch.cuda.max_memory_allocated" if device == "cuda" else "torch profiler live bytes"
    return {"device": device, "method": method + ", in one process", "transitions": out}
