"""DSV4 sparse-prefill scratch: replacing the buffer must not hold old and new at once.

``SparsePrefillKVBuffer`` replaces its scratch tensor when a request needs more rows or
another dtype. Allocating the replacement while the old tensor is still referenced makes
the transient peak old + new: growing 64 -> 96 MiB then needs 160 MiB and fails under a
128 MiB budget although 96 MiB alone fits. Releasing the old reference first keeps the
peak at max(old, new).

The peak is read from the CUDA caching allocator's statistics instead of being provoked
with an allocator cap. The statistics are per process and are reset right before each
replacement, so a test counts only its own tensors and no cap can reach other tests or a
resident server. Every test builds its own buffer: in CI, CustomTestCase retries a failed
test without running setUp again, and the retry must replay the same replacement.
"""

import unittest

import torch

from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import SparsePrefillKVBuffer
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=20, stage="base-b", runner_config="1-gpu-small")

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

    def test_retained_view_keeps_its_storage_and_values(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cuda"))
        view = kv_buffer.get(TOKENS_16_MIB)
        rows = torch.arange(view.shape[0], device=view.device) % 251
        view.copy_(rows.reshape(-1, 1, 1).expand_as(view))
        expected = view.clone()
        grown = kv_buffer.get(2 * TOKENS_16_MIB)
        grown.fill_(-1)
        self.assertNotEqual(grown.data_ptr(), view.data_ptr())
        self.assertTrue(torch.equal(view, expected), "a retained view changed")

    def test_smaller_request_reuses_storage(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cuda"))
        storage = kv_buffer.get(TOKENS_96_MIB).data_ptr()
        smaller = kv_buffer.get(TOKENS_64_MIB)
        self.assertEqual(smaller.data_ptr(), storage)
        self.assertEqual(smaller.shape[0], TOKENS_64_MIB)

    def test_failed_replacement_never_reports_a_head_it_no_longer_holds(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cuda"))
        head = ("k_cache", 0x1000, "indices", 0x2000)
        storage = kv_buffer.get_with_head(TOKENS_16_MIB, head)[0].data_ptr()
        with self.assertRaises(torch.cuda.OutOfMemoryError):
            kv_buffer.get_with_head(1 << 40, head)  # 1 PiB never fits
        rows, head_filled = kv_buffer.get_with_head(TOKENS_16_MIB, head)
        self.assertTrue(
            rows.data_ptr() == storage or not head_filled,
            "the head was reported filled for rows that are not the ones it describes",
        )


if __name__ == "__main__":
    unittest.main()
