"""DSV4 sparse-prefill scratch: replacing the buffer must not hold old and new at once.

``SparsePrefillKVBuffer`` replaces its scratch tensor when a request needs more rows or
another dtype. Allocating the replacement while the old tensor is still referenced makes
the transient peak old + new: growing 64 -> 96 MiB then needs 160 MiB and fails under a
128 MiB budget although 96 MiB alone fits. Releasing the old reference first keeps the
peak at max(old, new).

The peak is the bytes allocated, read from the CUDA caching allocator's statistics
instead of being provoked with an allocator cap (the allocator may keep a released block
reserved for its next allocation; what a replacement needs at once is what is allocated). The statistics are per process and are reset right before each
replacement, so a test counts only its own tensors and no cap can reach other tests or a
resident server. Every test builds its own buffer: in CI, CustomTestCase retries a failed
test without running setUp again, and the retry must replay the same replacement. What
needs no device (reuse, retained views, a failed replacement) is tested on CPU in
test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py.
"""

import unittest

import torch

from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import SparsePrefillKVBuffer
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=30, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
# Rows are (num_tokens, 1, 512): 1 KiB per token in bf16, 512 B in fp8.
TOKENS_16_MIB = 16 * 1024
TOKENS_64_MIB = 64 * 1024
TOKENS_96_MIB = 96 * 1024
BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestSparsePrefillKVBufferReplacement(CustomTestCase):
    def assert_replacement_peaks_at_mib(self, old, new, expected_mib):
        """Replace ``old`` (tokens, dtype) by ``new`` in a fresh buffer; the MiB allocated
        at the replacement's peak must not exceed the larger of the two buffers."""
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        kv_buffer = SparsePrefillKVBuffer(torch.device("cuda"))
        kv_buffer.get(*old)
        torch.cuda.reset_peak_memory_stats()
        kv_buffer.get(*new)
        peak = (torch.cuda.max_memory_allocated() - baseline) / MIB
        self.assertLessEqual(
            peak,
            expected_mib,
            f"the replacement peaked at {peak:.1f} MiB: the old scratch was still "
            f"held while the new one was allocated",
        )

    def test_grow_64_to_96_mib_bf16_peaks_at_96_mib(self):
        self.assert_replacement_peaks_at_mib(
            (TOKENS_64_MIB, BF16), (TOKENS_96_MIB, BF16), 96
        )

    def test_replace_48_mib_fp8_with_96_mib_bf16_peaks_at_96_mib(self):
        self.assert_replacement_peaks_at_mib(
            (TOKENS_96_MIB, FP8), (TOKENS_96_MIB, BF16), 96
        )

    def test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_peaks_at_96_mib(self):
        self.assert_replacement_peaks_at_mib(
            (TOKENS_96_MIB, BF16), (TOKENS_96_MIB, FP8), 96
        )


if __name__ == "__main__":
    unittest.main()
