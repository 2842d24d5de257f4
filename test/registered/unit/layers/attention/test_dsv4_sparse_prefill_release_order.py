"""DSV4 sparse-prefill scratch on CPU: what a replacement releases, keeps and forgets.

``SparsePrefillKVBuffer`` replaces its scratch when a request needs more rows or another
dtype. Allocated while the old scratch is still referenced, the replacement needs old +
new memory at once. A torch function mode sees each allocation: the old scratch must
already be dead by then. The CUDA test of the class measures the memory this saves.
"""

import unittest
import weakref

import torch
from torch.overrides import TorchFunctionMode

from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import SparsePrefillKVBuffer
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
HEAD = ("k_cache", 0x1000, "indices", 0x2000)


class OnEmpty(TorchFunctionMode):
    """Records at each ``torch.empty`` whether ``old`` is alive; raises if ``fail``."""

    def __init__(self, old, fail=False):
        super().__init__()
        self.old, self.fail, self.alive = weakref.ref(old), fail, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.empty:
            self.alive.append(self.old() is not None)
            if self.fail:
                raise RuntimeError("out of memory")
        return func(*args, **(kwargs or {}))


class TestSparsePrefillKVBufferReleaseOrder(CustomTestCase):
    # Each test builds its own buffer: CustomTestCase's retry in CI skips setUp.

    def test_growing_releases_the_old_scratch_before_allocating(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get(64)
        with OnEmpty(kv_buffer._buffer) as mode:
            kv_buffer.get(96)
        self.assertEqual(mode.alive, [False], "the old scratch was alive")

    def test_changing_dtype_releases_the_old_scratch_before_allocating(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get(96, BF16)
        with OnEmpty(kv_buffer._buffer) as mode:
            kv_buffer.get(96, FP8)
        self.assertEqual(mode.alive, [False], "the bf16 scratch was alive")

    def test_a_request_that_fits_keeps_the_scratch(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get(96)
        scratch = kv_buffer._buffer
        smaller = kv_buffer.get(64)
        self.assertIs(kv_buffer._buffer, scratch)
        self.assertIs(smaller._base, scratch)

    def test_a_view_held_across_a_replacement_keeps_its_values(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        view = kv_buffer.get(64)
        view.copy_((torch.arange(view.numel()) % 251).reshape(view.shape))
        expected = view.clone()
        kv_buffer.get(96).fill_(-1)
        self.assertTrue(torch.equal(view, expected), "a retained view changed")

    def test_a_failed_replacement_keeps_no_head_for_rows_it_dropped(self):
        kv_buffer = SparsePrefillKVBuffer(torch.device("cpu"))
        kv_buffer.get_with_head(64, HEAD)
        held = kv_buffer._buffer
        with self.assertRaises(RuntimeError), OnEmpty(held, fail=True):
            kv_buffer.get_with_head(96, HEAD)
        # The head key may only outlive the call together with the rows it describes.
        self.assertTrue(kv_buffer._buffer is held or kv_buffer._head_source is None)


if __name__ == "__main__":
    unittest.main()
