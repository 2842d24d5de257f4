"""DSV4 sparse-prefill scratch: replacing the buffer must not hold old and new at once.

``SparsePrefillKVBuffer`` replaces its scratch tensor when a request needs more rows or
another dtype. Allocating the replacement while the old tensor is still referenced makes
the transient peak old + new: growing 64 -> 96 MiB then needs 160 MiB and fails under a
128 MiB budget although 96 MiB alone fits. Releasing the old reference first keeps the
peak at max(old, new).

The peak is read from the CUDA caching allocator's statistics instead of being provoked
with an allocator cap. The statistics are per process and are reset right before each
replacement, so a test counts only its own tensors, needs no fresh process, and no cap
can reach other tests or a resident server. The CPU allocator keeps no such statistics,
and a capped CPU case would need a process of its own, so only CUDA is registered.
"""

import unittest

import torch

from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import SparsePrefillKVBuffer
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=20, stage="base-b", runner_config="1-gpu-small")

MIB = 1 << 20
BUDGET_MIB = 128
PEAK_LIMIT_MIB = 100
# Rows are (num_tokens, 1, 512): 1 KiB per token in bf16, 512 B in fp8.
TOKENS_16_MIB = 16 * 1024
TOKENS_64_MIB = 64 * 1024
TOKENS_96_MIB = 96 * 1024
BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestSparsePrefillKVBufferReplacement(CustomTestCase):
    def setUp(self):
        super().setUp()
        torch.cuda.synchronize()
        self.baseline = torch.cuda.memory_allocated()
        self.kv_buffer = SparsePrefillKVBuffer(torch.device("cuda"))

    def tearDown(self):
        del self.kv_buffer
        torch.cuda.empty_cache()

    def replacement_peak_mib(self, old, new):
        """MiB allocated at the peak of replacing ``old`` (tokens, dtype) by ``new``."""
        self.kv_buffer.get(*old)
        torch.cuda.reset_peak_memory_stats()
        self.kv_buffer.get(*new)
        return (torch.cuda.max_memory_allocated() - self.baseline) / MIB

    def assert_fits_budget(self, old, new):
        peak = self.replacement_peak_mib(old, new)
        self.assertLessEqual(
            peak,
            BUDGET_MIB,
            f"the replacement peaked at {peak:.1f} MiB: the old scratch was still "
            f"held while the new one was allocated",
        )

    def test_grow_64_to_96_mib_bf16_fits_128_mib_budget(self):
        self.assert_fits_budget((TOKENS_64_MIB, BF16), (TOKENS_96_MIB, BF16))

    def test_replace_48_mib_fp8_with_96_mib_bf16_fits_128_mib_budget(self):
        self.assert_fits_budget((TOKENS_96_MIB, FP8), (TOKENS_96_MIB, BF16))

    def test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_fits_128_mib_budget(self):
        self.assert_fits_budget((TOKENS_96_MIB, BF16), (TOKENS_96_MIB, FP8))

    def test_replacement_peak_stays_below_100_mib(self):
        peak = self.replacement_peak_mib((TOKENS_64_MIB, BF16), (TOKENS_96_MIB, BF16))
        self.assertLess(peak, PEAK_LIMIT_MIB)

    def test_retained_view_keeps_its_storage_and_values(self):
        view = self.kv_buffer.get(TOKENS_16_MIB)
        rows = torch.arange(view.shape[0], device=view.device) % 251
        view.copy_(rows.reshape(-1, 1, 1).expand_as(view))
        expected = view.clone()
        grown = self.kv_buffer.get(2 * TOKENS_16_MIB)
        grown.fill_(-1)
        self.assertNotEqual(grown.data_ptr(), view.data_ptr())
        self.assertTrue(torch.equal(view, expected), "a retained view changed")

    def test_smaller_request_reuses_storage(self):
        storage = self.kv_buffer.get(TOKENS_96_MIB).data_ptr()
        smaller = self.kv_buffer.get(TOKENS_64_MIB)
        self.assertEqual(smaller.data_ptr(), storage)
        self.assertEqual(smaller.shape[0], TOKENS_64_MIB)

    def test_failed_replacement_never_reports_a_head_it_no_longer_holds(self):
        head = ("k_cache", 0x1000, "indices", 0x2000)
        storage = self.kv_buffer.get_with_head(TOKENS_16_MIB, head)[0].data_ptr()
        with self.assertRaises(torch.cuda.OutOfMemoryError):
            self.kv_buffer.get_with_head(1 << 40, head)  # 1 PiB never fits
        rows, head_filled = self.kv_buffer.get_with_head(TOKENS_16_MIB, head)
        if head_filled:
            self.assertEqual(rows.data_ptr(), storage)


if __name__ == "__main__":
    unittest.main()
