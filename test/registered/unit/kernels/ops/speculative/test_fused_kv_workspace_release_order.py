"""Fused KV materialization: the old workspaces are released before their replacements.

``FusedKVMaterializeHelper._ensure_workspace`` replaces its projection, K and V
workspaces when a batch needs more context rows (the capacity at least doubles) or
another dtype. If each replacement is allocated while the helper still references the
old workspaces, old and new are alive at once and growing from C to 2C peaks above
the new total.

These tests run the real method without any memory limit: weak references to the
three old workspaces must already be dead when the first new one is allocated; a
batch that fits keeps the workspaces; and a dtype change whose second allocation
fails leaves a helper whose next batch gets workspaces of its own dtype, sized for
it. The helper is built without its constructor (which needs a draft model's
layers); only the fields ``_ensure_workspace`` reads are set. The CUDA test of the
same method measures the peak the order saves.
"""

import unittest
import weakref
from unittest import mock

import torch

from sglang.kernels.ops.speculative import fused_kv_materialize
from sglang.kernels.ops.speculative.fused_kv_materialize import FusedKVMaterializeHelper
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=45, suite="base-a-test-cpu")

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


class TestFusedKVWorkspaceReleaseOrder(CustomTestCase):
    # Each test builds its own helper: in CI, CustomTestCase retries a failed test
    # without running setUp again, and the retry must start from the same state.

    def old_workspaces_alive_at_each_allocation(self, helper, total_ctx, dtype):
        """Which old workspaces were still alive when ``torch.empty`` or
        ``torch.empty_like`` allocated during ``_ensure_workspace``, per call."""
        old = [weakref.ref(getattr(helper, name)) for name in WORKSPACES]
        seen = []

        def observing(allocate):
            def allocate_and_observe(*args, **kwargs):
                seen.append([n for n, ref in zip(WORKSPACES, old) if ref() is not None])
                return allocate(*args, **kwargs)

            return allocate_and_observe

        torch_module = fused_kv_materialize.torch
        with (
            mock.patch.object(torch_module, "empty", observing(torch.empty)),
            mock.patch.object(torch_module, "empty_like", observing(torch.empty_like)),
        ):
            helper._ensure_workspace(total_ctx, dtype)
        return seen

    def test_growing_releases_the_old_workspaces_before_allocating(self):
        helper = make_helper()
        helper._ensure_workspace(64, torch.bfloat16)
        seen = self.old_workspaces_alive_at_each_allocation(helper, 65, torch.bfloat16)
        self.assertEqual(len(seen), 3)
        self.assertEqual(
            seen[0],
            [],
            "old workspaces were alive while the first new one was allocated",
        )
        self.assertEqual(helper._workspace_capacity, 128)

    def test_changing_dtype_releases_the_old_workspaces_before_allocating(self):
        helper = make_helper()
        helper._ensure_workspace(64, torch.float16)
        seen = self.old_workspaces_alive_at_each_allocation(helper, 64, torch.bfloat16)
        self.assertEqual(len(seen), 3)
        self.assertEqual(
            seen[0], [], "float16 workspaces were alive while bfloat16 was allocated"
        )
        dtypes = [getattr(helper, name).dtype for name in WORKSPACES]
        self.assertEqual(dtypes, [torch.bfloat16] * 3)

    def test_a_request_that_fits_reuses_the_workspaces(self):
        helper = make_helper()
        helper._ensure_workspace(64, torch.bfloat16)
        before = [getattr(helper, name) for name in WORKSPACES]
        seen = self.old_workspaces_alive_at_each_allocation(helper, 48, torch.bfloat16)
        self.assertEqual(seen, [])
        for name, workspace in zip(WORKSPACES, before):
            self.assertIs(getattr(helper, name), workspace, name)
        self.assertEqual(helper._workspace_capacity, 64)

    def test_a_failed_dtype_change_leaves_workspaces_of_the_next_batchs_dtype(self):
        helper = make_helper()
        helper._ensure_workspace(64, torch.float16)
        allocate = torch.empty
        calls = []

        def second_allocation_fails(*args, **kwargs):
            calls.append(kwargs.get("dtype"))
            if len(calls) == 2:
                raise RuntimeError("no memory")
            return allocate(*args, **kwargs)

        with mock.patch.object(
            fused_kv_materialize.torch, "empty", second_allocation_fails
        ):
            with self.assertRaises(RuntimeError):
                helper._ensure_workspace(64, torch.bfloat16)
        self.assertEqual(calls, [torch.bfloat16, torch.bfloat16])
        # The next batch is float16 again: every workspace must be float16 (the
        # projection is written with torch.mm(out=)), sized for it, not doubled from
        # a capacity the helper no longer holds.
        helper._ensure_workspace(64, torch.float16)
        dtypes = [getattr(helper, name).dtype for name in WORKSPACES]
        self.assertEqual(dtypes, [torch.float16] * 3)
        self.assertEqual(helper._proj_workspace.shape, (64, 2 * 2 * 2 * 8))
        self.assertEqual(helper._k_workspace.shape, (2, 64, 2, 8))
        self.assertEqual(helper._v_workspace.shape, helper._k_workspace.shape)


if __name__ == "__main__":
    unittest.main()
