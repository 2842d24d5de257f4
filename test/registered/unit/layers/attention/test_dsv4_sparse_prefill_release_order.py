"""DSV4 sparse-prefill scratch on CPU: what a replacement releases, keeps and forgets.

``SparsePrefillKVBuffer`` replaces its scratch tensor when a request needs more rows
or another dtype. If the replacement is allocated while the buffer still references
the old tensor, both are alive at once and the replacement needs old + new memory.

These tests run the real class without any memory limit: a weak reference to the old
scratch must already be dead when ``torch.empty`` allocates the replacement; a
request that fits keeps the scratch; a view a caller still holds keeps its values;
and a replacement whose allocation fails leaves no head key for rows the buffer no
longer holds. The CUDA test of the same class measures the peak the order saves.
"""

import unittest
import weakref
from unittest import mock

import torch

from sglang.srt.layers.attention.dsv4 import sparse_prefill_utils
from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import SparsePrefillKVBuffer
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=50, suite="base-a-test-cpu")

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
HEAD = ("k_cache", 0x1000, "indices", 0x2000)


class TestSparsePrefillKVBufferReleaseOrder(CustomTestCase):
    # Each test builds its own buffer: in CI, CustomTestCase retries a failed test
    # without running setUp again, and the retry must start from the same state.

    def old_scratch_alive_at_each_allocation(self, kv_buffer, request):
        """Whether the old scratch was still alive when ``torch.empty`` allocated
        during ``request()``, per call."""
        old_scratch = weakref.ref(kv_buffer._buffer)
        seen = []
        allocate = torch.empty

        def observing_empty(*args, **kwargs):
            seen.append(old_scratch() is not None)
            return allocate(*args, **kwargs)

        with mock.patch.object(sparse_prefill_utils.torch, "empty", observing_empty):
            request()
        return seen

    def test_growing_releases_the_old_scratch_before_allocating(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get(64)
        seen = self.old_scratch_alive_at_each_allocation(
            kv_buffer, lambda: kv_buffer.get(96)
        )
        self.assertEqual(
            seen, [False], "the 64-row scratch was alive while 96 were allocated"
        )

    def test_changing_dtype_releases_the_old_scratch_before_allocating(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get(96, BF16)
        seen = self.old_scratch_alive_at_each_allocation(
            kv_buffer, lambda: kv_buffer.get(96, FP8)
        )
        self.assertEqual(
            seen, [False], "the bf16 scratch was alive while fp8 was allocated"
        )

    def test_a_request_that_fits_keeps_the_scratch(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get(96)
        scratch = kv_buffer._buffer
        smaller = kv_buffer.get(64)
        self.assertIs(kv_buffer._buffer, scratch)
        self.assertIs(smaller._base, scratch)
        self.assertEqual(smaller.shape[0], 64)

    def test_a_view_held_across_a_replacement_keeps_its_values(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        view = kv_buffer.get(64)
        values = torch.arange(view.numel()) % 251
        view.copy_(values.reshape(view.shape))
        expected = view.clone()
        kv_buffer.get(96).fill_(-1)
        self.assertTrue(torch.equal(view, expected), "a retained view changed")

    def test_a_failed_replacement_keeps_no_head_for_rows_it_dropped(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get_with_head(64, HEAD)
        held = kv_buffer._buffer
        with mock.patch.object(
            sparse_prefill_utils.torch, "empty", side_effect=RuntimeError("no memory")
        ):
            with self.assertRaises(RuntimeError):
                kv_buffer.get_with_head(96, HEAD)
        # The head key may only outlive the call together with the rows it describes.
        self.assertTrue(
            kv_buffer._buffer is held or kv_buffer._head_source is None,
            "the head key describes rows the buffer no longer holds",
        )


if __name__ == "__main__":
    unittest.main()
