"""DSV4 sparse-prefill scratch: a replacement needs only the difference between the old
scratch and the new one.

``SparsePrefillKVBuffer`` replaces its scratch when a request needs more rows or another
dtype. Allocated while the old scratch is still referenced, the replacement needs old +
new at once: growing 64 -> 96 MiB allocates 96 MiB beyond what was held (160 MiB in
all), and fails under a 128 MiB budget although 96 MiB alone fits. Released first, the
call allocates only the growth: 32 MiB here, nothing when the new scratch is smaller.

The growth is read from the CUDA caching allocator's statistics (the peak allocated
during the call, less what was allocated before it): no allocator cap, so nothing can
limit other tests or a resident server.
"""

import unittest

import torch

from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import SparsePrefillKVBuffer
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=15, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
# Rows are (num_tokens, 1, 512): 1 KiB per token in bf16, 512 B in fp8.
TOKENS_64_MIB = 64 * 1024
TOKENS_96_MIB = 96 * 1024
BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestSparsePrefillKVBufferReplacement(CustomTestCase):
    # Each test builds its own buffer: CustomTestCase's retry in CI skips setUp.

    def assert_replacement_allocates_mib(self, old, new, growth_mib):
        """Replaces ``old`` (tokens, dtype) by ``new`` in a fresh buffer: the call may
        allocate ``growth_mib`` beyond what was allocated before it."""
        kv_buffer = SparsePrefillKVBuffer(torch.device("cuda"))
        kv_buffer.get(*old)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        kv_buffer.get(*new)
        torch.cuda.synchronize()
        growth = (torch.cuda.max_memory_allocated() - before) / MIB
        self.assertLessEqual(
            growth,
            growth_mib,
            f"the replacement allocated {growth:.1f} MiB beyond what was held: the "
            "old scratch was still referenced while the new one was allocated",
        )

    def test_grow_64_to_96_mib_bf16_peaks_at_96_mib(self):
        self.assert_replacement_allocates_mib(
            (TOKENS_64_MIB, BF16), (TOKENS_96_MIB, BF16), 32
        )

    def test_replace_48_mib_fp8_with_96_mib_bf16_peaks_at_96_mib(self):
        self.assert_replacement_allocates_mib(
            (TOKENS_96_MIB, FP8), (TOKENS_96_MIB, BF16), 48
        )

    def test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_peaks_at_96_mib(self):
        self.assert_replacement_allocates_mib(
            (TOKENS_96_MIB, BF16), (TOKENS_96_MIB, FP8), 0
        )


if __name__ == "__main__":
    unittest.main()
