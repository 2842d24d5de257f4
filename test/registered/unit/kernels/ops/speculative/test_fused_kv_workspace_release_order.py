"""Fused KV materialization on CPU: the old workspaces are released before their
replacements are allocated.

``FusedKVMaterializeHelper._ensure_workspace`` replaces its projection, K and V
workspaces when a batch needs more context rows (the capacity at least doubles) or
another dtype. Allocated while the old ones are still referenced, old and new are alive
at once. A torch function mode sees each allocation: the old workspaces must already be
dead at the first. The helper is built without its constructor (which needs a draft
model); the CUDA test of the method measures the memory this saves.
"""

import unittest
import weakref

import torch
from torch.overrides import TorchFunctionMode

from sglang.kernels.ops.speculative.fused_kv_materialize import FusedKVMaterializeHelper
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

WORKSPACES = ("_proj_workspace", "_k_workspace", "_v_workspace")


def make_helper():
    """A helper for 2 draft layers of 2 KV heads of 8, on CPU, with no workspace yet."""
    helper = FusedKVMaterializeHelper.__new__(FusedKVMaterializeHelper)
    helper.n_layers, helper.num_kv_heads, helper.head_dim = 2, 2, 8
    helper.kv_size = helper.num_kv_heads * helper.head_dim
    helper.layer_out_dim = 2 * helper.kv_size
    helper.device = torch.device("cpu")
    helper._workspace_capacity, helper._workspace_dtype = 0, None
    helper._proj_workspace = helper._k_workspace = helper._v_workspace = None
    return helper


class OnAllocation(TorchFunctionMode):
    """Counts, at each ``torch.empty(_like)``, the old workspaces still alive; the
    ``fail_at``-th allocation raises."""

    def __init__(self, helper, fail_at=None):
        super().__init__()
        self.old = [weakref.ref(getattr(helper, name)) for name in WORKSPACES]
        self.fail_at, self.alive = fail_at, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.empty, torch.empty_like):
            self.alive.append(sum(ref() is not None for ref in self.old))
            if len(self.alive) == self.fail_at:
                raise RuntimeError("out of memory")
        return func(*args, **(kwargs or {}))


class TestFusedKVWorkspaceReleaseOrder(CustomTestCase):
    # Each test builds its own helper: CustomTestCase's retry in CI skips setUp.

    def test_growing_releases_the_old_workspaces_before_allocating(self):
        helper = make_helper()
        helper._ensure_workspace(64, torch.bfloat16)
        with OnAllocation(helper) as mode:
            helper._ensure_workspace(65, torch.bfloat16)
        self.assertEqual(
            mode.alive, [0, 0, 0], "workspaces were alive while allocating"
        )
        self.assertEqual(helper._workspace_capacity, 128)

    def test_changing_dtype_releases_the_old_workspaces_before_allocating(self):
        helper = make_helper()
        helper._ensure_workspace(64, torch.float16)
        with OnAllocation(helper) as mode:
            helper._ensure_workspace(64, torch.bfloat16)
        self.assertEqual(
            mode.alive, [0, 0, 0], "float16 workspaces were alive while allocating"
        )

    def test_a_request_that_fits_reuses_the_workspaces(self):
        helper = make_helper()
        helper._ensure_workspace(64, torch.bfloat16)
        before = [getattr(helper, name) for name in WORKSPACES]
        helper._ensure_workspace(48, torch.bfloat16)
        self.assertEqual([getattr(helper, name) for name in WORKSPACES], before)
        self.assertEqual(helper._workspace_capacity, 64)

    def test_a_failed_dtype_change_leaves_workspaces_of_the_next_batchs_dtype(self):
        helper = make_helper()
        helper._ensure_workspace(64, torch.float16)
        with self.assertRaises(RuntimeError), OnAllocation(helper, fail_at=2):
            helper._ensure_workspace(64, torch.bfloat16)
        # The next float16 batch needs every workspace in float16 (the projection is
        # written with torch.mm(out=)), sized for it, not doubled from a lost capacity.
        helper._ensure_workspace(64, torch.float16)
        dtypes = [getattr(helper, name).dtype for name in WORKSPACES]
        self.assertEqual(dtypes, [torch.float16] * 3)
        self.assertEqual(helper._k_workspace.shape, (2, 64, 2, 8))


if __name__ == "__main__":
    unittest.main()
