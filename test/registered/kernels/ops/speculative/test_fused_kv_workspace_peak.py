"""Fused KV materialization: growing the workspaces must not hold old and new at once.

``FusedKVMaterializeHelper._ensure_workspace`` keeps a projection workspace and a K
and a V workspace, each sized by every draft layer times the context capacity, and
at least doubles the capacity when a batch needs more rows or another dtype.
Allocating each replacement while the old workspaces are still referenced makes
growing from C to 2C peak above the new total: with 4 layers of 8 KV heads of 128
in bf16, 2048 -> 4096 tokens peaks at 144 MiB instead of 128 MiB.

The peak is read from the CUDA caching allocator's statistics, reset right before
each growth, relative to what the process held before: no allocator cap, so nothing
can limit other tests or a resident server. The helper is built without its
constructor (which needs a draft model's layers). Every test builds its own helper:
in CI, CustomTestCase retries a failed test without running setUp again, and the
retry must replay the same growth. Reuse and a failed allocation need no device: the
CPU test in test/registered/unit/kernels/ops/speculative/ checks them.
"""

import unittest

import torch

from sglang.kernels.ops.speculative.fused_kv_materialize import FusedKVMaterializeHelper
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=35, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
WORKSPACES = ("_proj_workspace", "_k_workspace", "_v_workspace")


def make_helper():
    """A helper for 4 draft layers of 8 KV heads of 128, with no workspace yet. In
    bf16 the K and the V workspace take 8 KiB per context token each and the
    projection workspace 16 KiB: 2048 tokens hold 64 MiB, 4096 tokens 128 MiB."""
    helper = FusedKVMaterializeHelper.__new__(FusedKVMaterializeHelper)
    helper.n_layers, helper.num_kv_heads, helper.head_dim = 4, 8, 128
    helper.kv_size = helper.num_kv_heads * helper.head_dim
    helper.layer_out_dim = 2 * helper.kv_size
    helper.device = torch.device("cuda")
    helper._workspace_capacity, helper._workspace_dtype = 0, None
    helper._proj_workspace = helper._k_workspace = helper._v_workspace = None
    return helper


def workspace_mib(helper):
    return sum(getattr(helper, name).nbytes for name in WORKSPACES) / MIB


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestFusedKVWorkspaceGrowth(CustomTestCase):
    def assert_growth_peaks_at_mib(self, old, new, expected_mib):
        """Grow a fresh helper from ``old`` (tokens, dtype) to ``new``; the MiB
        allocated at the growth's peak must not exceed the new workspaces' total."""
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        helper = make_helper()
        helper._ensure_workspace(*old)
        torch.cuda.reset_peak_memory_stats()
        helper._ensure_workspace(*new)
        peak = (torch.cuda.max_memory_allocated() - baseline) / MIB
        self.assertEqual(workspace_mib(helper), expected_mib)
        self.assertLessEqual(
            peak,
            expected_mib,
            f"the growth peaked at {peak:.1f} MiB: old workspaces were still "
            f"held while the new ones were allocated",
        )

    def test_grow_2048_to_4096_tokens_peaks_at_the_new_128_mib(self):
        self.assert_growth_peaks_at_mib(
            (2048, torch.bfloat16), (2049, torch.bfloat16), 128
        )

    def test_float16_to_bfloat16_doubles_and_peaks_at_the_new_128_mib(self):
        self.assert_growth_peaks_at_mib(
            (2048, torch.float16), (2048, torch.bfloat16), 128
        )


if __name__ == "__main__":
    unittest.main()
