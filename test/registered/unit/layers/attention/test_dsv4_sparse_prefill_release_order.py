"""DSV4 sparse-prefill scratch: the old buffer is released before its replacement.

``SparsePrefillKVBuffer`` replaces its scratch tensor when a request needs more rows
or another dtype. If the replacement is allocated while the buffer still references
the old tensor, both are alive at once and the replacement needs old + new memory.

These tests watch the order on the real class without any memory limit: a weak
reference to the old scratch must already be dead when ``torch.empty`` allocates the
replacement, and the head key that described the old rows must already be forgotten.
The CUDA test beside this file measures the peak that order saves.
"""

import unittest
import weakref
from unittest import mock

import torch

from sglang.srt.layers.attention.dsv4 import sparse_prefill_utils
from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import SparsePrefillKVBuffer
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
HEAD = ("k_cache", 0x1000, "indices", 0x2000)


class TestSparsePrefillKVBufferReleaseOrder(CustomTestCase):
    # Each test builds its own buffer: in CI, CustomTestCase retries a failed test
    # without running setUp again, and the retry must start from the same state.

    def observe_replacement(self, kv_buffer, request):
        """What held while ``torch.empty`` allocated during ``request()``, per call:
        (the old scratch still alive, the head key still set)."""
        old_scratch = weakref.ref(kv_buffer._buffer)
        seen = []
        allocate = torch.empty

        def observing_empty(*args, **kwargs):
            seen.append((old_scratch() is not None, kv_buffer._head_source is not None))
            return allocate(*args, **kwargs)

        with mock.patch.object(sparse_prefill_utils.torch, "empty", observing_empty):
            request()
        return seen

    def test_growing_releases_the_old_scratch_before_allocating(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get(64)
        seen = self.observe_replacement(kv_buffer, lambda: kv_buffer.get(96))
        self.assertEqual(len(seen), 1)
        self.assertFalse(
            seen[0][0], "the 64-row scratch was alive while 96 were allocated"
        )

    def test_changing_dtype_releases_the_old_scratch_before_allocating(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get(96, BF16)
        seen = self.observe_replacement(kv_buffer, lambda: kv_buffer.get(96, FP8))
        self.assertEqual(len(seen), 1)
        self.assertFalse(
            seen[0][0], "the bf16 scratch was alive while fp8 was allocated"
        )

    def test_growing_forgets_the_head_before_allocating(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get_with_head(64, HEAD)
        seen = self.observe_replacement(
            kv_buffer, lambda: kv_buffer.get_with_head(96, HEAD)
        )
        self.assertEqual(len(seen), 1)
        self.assertFalse(seen[0][1], "the head key still described the old rows")


if __name__ == "__main__":
    unittest.main()
