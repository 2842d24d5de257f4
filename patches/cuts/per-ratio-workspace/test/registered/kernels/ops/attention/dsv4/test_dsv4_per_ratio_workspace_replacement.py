"""DSV4 per-ratio sparse-prefill workspace on CUDA: the replacement's peak and key.

``SparsePrefillWorkspace`` replaces its tensor when a request needs more rows or
another dtype. Allocating the replacement while the old tensor is still referenced
makes the transient peak old + new: growing 64 -> 96 MiB then needs 160 MiB. Released
first, the peak is max(old, new), and the caching allocator may hand the replacement
the old block's address. The shared compressed-KV path keys the dequantized prefix of
a workspace in the per-forward gather cache; keyed on the address alone, the replaced
rows would still count as valid. ``generation`` changes on every replacement.

The peak is the bytes allocated, read from the caching allocator's statistics (reset
right before the replacement, so a test counts only its own tensors). The address
test allocates in a private memory pool that holds nothing else, where the released
block is the first free one. Every test builds its own workspace: in CI,
CustomTestCase retries a failed test without running setUp again. What needs no
device is tested on CPU in test/registered/unit/layers/attention/
test_dsv4_per_ratio_workspace_release_order.py.
"""

import unittest

import torch

from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import SparsePrefillWorkspace
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=40, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
# Rows are (num_tokens, 1, 512): 1 KiB per token in bf16, 512 B in fp8.
TOKENS_64_MIB = 64 * 1024
TOKENS_96_MIB = 96 * 1024
BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
SOURCE = 0  # the layer whose compressed KV the prefix holds


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator")
class TestSparsePrefillWorkspaceReplacementOnCuda(CustomTestCase):
    def test_grow_64_to_96_mib_peaks_at_96_mib(self):
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        workspace = SparsePrefillWorkspace(torch.device("cuda"))
        workspace.get(TOKENS_64_MIB)
        torch.cuda.reset_peak_memory_stats()
        workspace.get(TOKENS_96_MIB)
        peak = (torch.cuda.max_memory_allocated() - baseline) / MIB
        self.assertLessEqual(
            peak,
            96,
            f"growing peaked at {peak:.1f} MiB: the old workspace was still held "
            "while the new one was allocated",
        )

    def test_bf16_to_fp8_in_the_freed_block_invalidates_the_cached_prefix(self):
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            workspace = SparsePrefillWorkspace(torch.device("cuda"))
            rows = workspace.get(64, BF16)
            rows.fill_(1)  # the dequantized prefix of SOURCE
            before = (SOURCE, rows.data_ptr(), workspace.generation)
            del rows
            replaced = workspace.get(64, FP8)
            after = (SOURCE, replaced.data_ptr(), workspace.generation)
            del replaced, workspace
        self.assertNotEqual(
            after,
            before,
            "the fp8 workspace took the bf16 rows' block and kept their prefix valid",
        )


if __name__ == "__main__":
    unittest.main()
