"""Fused KV materialization: growing the workspaces needs only their growth.

``FusedKVMaterializeHelper._ensure_workspace`` keeps a projection, a K and a V
workspace, each sized by every draft layer times the context capacity, and at least
doubles the capacity when a batch needs more rows or another dtype. With 4 layers of 8
KV heads of 128 in bf16, the workspaces hold 64 MiB at 2,048 tokens and 128 MiB at
4,096. Allocated while the old ones are still referenced, growing allocates 80 MiB
beyond what was held (144 MiB in all); released first, only the 64 MiB of growth.

The growth is read from the CUDA caching allocator's statistics (the peak allocated
during the call, less what was allocated before it): no allocator cap, so nothing can
limit other tests or a resident server. The helper is built without its constructor
(which needs a draft model's layers).
"""

import unittest

import torch

from sglang.kernels.ops.speculative.fused_kv_materialize import FusedKVMaterializeHelper
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=15, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20


def make_helper():
    """A helper for 4 draft layers of 8 KV heads of 128, with no workspace yet."""
    helper = FusedKVMaterializeHelper.__new__(FusedKVMaterializeHelper)
    helper.n_layers, helper.num_kv_heads, helper.head_dim = 4, 8, 128
    helper.kv_size = helper.num_kv_heads * helper.head_dim
    helper.layer_out_dim = 2 * helper.kv_size
    helper.device = torch.device("cuda")
    helper._workspace_capacity, helper._workspace_dtype = 0, None
    helper._proj_workspace = helper._k_workspace = helper._v_workspace = None
    return helper


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestFusedKVWorkspaceGrowth(CustomTestCase):
    # Each test builds its own helper: CustomTestCase's retry in CI skips setUp.

    def assert_growth_allocates_64_mib(self, old, new):
        """Grows a fresh helper from ``old`` (tokens, dtype) to ``new``: 64 -> 128 MiB
        of workspaces, so the call may allocate 64 MiB beyond what was held."""
        helper = make_helper()
        helper._ensure_workspace(*old)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        helper._ensure_workspace(*new)
        torch.cuda.synchronize()
        growth = (torch.cuda.max_memory_allocated() - before) / MIB
        self.assertEqual(helper._workspace_capacity, 4096)
        self.assertLessEqual(
            growth,
            64,
            f"the growth allocated {growth:.1f} MiB beyond what was held: old "
            "workspaces were still referenced while the new ones were allocated",
        )

    def test_grow_2048_to_4096_tokens_peaks_at_the_new_128_mib(self):
        self.assert_growth_allocates_64_mib(
            (2048, torch.bfloat16), (2049, torch.bfloat16)
        )

    def test_float16_to_bfloat16_doubles_and_peaks_at_the_new_128_mib(self):
        self.assert_growth_allocates_64_mib(
            (2048, torch.float16), (2048, torch.bfloat16)
        )


if __name__ == "__main__":
    unittest.main()
