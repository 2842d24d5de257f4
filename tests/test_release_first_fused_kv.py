"""Patch 0003 on the real ``FusedKVMaterializeHelper``: sglang's states, and recovery."""

import pytest
import torch

from sglang_overlay import FUSED_KV_PATCH_ID
from tools.benchmark import fused_kv, overlay

pytestmark = pytest.mark.usefixtures("fused_kv_importable")

SHAPE = {"n_layers": 2, "num_kv_heads": 2, "head_dim": 4}
F16, BF16 = torch.float16, torch.bfloat16
REQUESTS = [(5, BF16), (5, BF16), (3, BF16), (6, BF16), (11, BF16), (11, F16), (2, F16),
            (40, F16), (40, BF16), (1, BF16), (81, BF16), (81, BF16), (162, F16)]  # fmt: skip


def trace(order: str) -> list:
    """Each request's resulting state and whether the K workspace was replaced."""
    ws, steps = fused_kv.helper(**SHAPE), []
    with overlay(order == "overlay", FUSED_KV_PATCH_ID):
        for total_ctx, dtype in REQUESTS:
            before = ws._k_workspace
            ws._ensure_workspace(total_ctx, dtype)
            held = (ws._proj_workspace, ws._k_workspace, ws._v_workspace)
            shapes, dtypes = [tuple(t.shape) for t in held], {t.dtype for t in held}
            replaced = ws._k_workspace is not before
            steps.append((ws._workspace_capacity, ws._workspace_dtype, shapes, dtypes, replaced))
    return steps


def test_the_overlays_method_ends_every_request_as_sglangs_does():
    unmodified, overlay = trace("unmodified"), trace("overlay")
    assert overlay == unmodified
    # sglang's rule, worked out by hand: at least double on a growth or a dtype change, else reuse
    assert [s[0] for s in overlay] == [5, 5, 5, 10, 20, 40, 40, 40, 80, 80, 160, 160, 320]
    assert [s[4] for s in overlay].count(True) == 7


def test_a_failed_allocation_claims_nothing_and_the_next_request_recovers(monkeypatch):
    ws = fused_kv.helper(**SHAPE)
    with overlay(True, FUSED_KV_PATCH_ID):
        ws._ensure_workspace(8, BF16)
        real_empty = torch.empty

        def empty(shape, *args, **kwargs):
            if len(shape) == 4:  # the K workspace
                raise torch.OutOfMemoryError("simulated out of memory")
            return real_empty(shape, *args, **kwargs)

        monkeypatch.setattr(torch, "empty", empty)
        with pytest.raises(torch.OutOfMemoryError):
            ws._ensure_workspace(9, BF16)
        assert (ws._workspace_capacity, ws._workspace_dtype) == (0, None)
        assert ws._k_workspace is None and ws._v_workspace is None
        monkeypatch.setattr(torch, "empty", real_empty)
        ws._ensure_workspace(9, BF16)
    assert (ws._workspace_capacity, ws._workspace_dtype) == (9, BF16)
    assert tuple(ws._k_workspace.shape) == tuple(ws._v_workspace.shape) == (2, 9, 2, 4)
