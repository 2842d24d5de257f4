"""DSV4 per-ratio sparse-prefill workspace on CPU: release first, and say so.

``SparsePrefillWorkspace`` replaces its tensor when a request needs more rows or
another dtype. Allocating the replacement while the old tensor is still referenced
needs old + new memory, so the old one is released first. The shared compressed-KV
path keeps the dequantized prefix of a workspace valid across layers, keyed in the
per-forward gather cache. Released first, the replacement can get the old address
back, so a key built from the address would call the replaced rows valid:
``generation`` changes on every replacement and tells the two allocations apart.

These tests run the real class on CPU without any memory limit. A stand-in for the
allocator that hands every allocation the same address (what CUDA's caching
allocator often does once the old block is free) shows that a same-address
replacement still changes the key. The CUDA file measures the peak the order saves.
"""

import unittest
import weakref
from unittest import mock

import torch

from sglang.srt.layers.attention.dsv4 import sparse_prefill_utils
from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import (
    WORKSPACE_DIM,
    SparsePrefillWorkspace,
)
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=50, suite="base-a-test-cpu")

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
SOURCE = 0  # the layer whose compressed KV the prefix holds


def prefix_key(workspace, rows):
    """What the gather cache records for a prefix dequantized into ``rows``: the
    source, the allocation address, and the workspace's generation."""
    return (SOURCE, rows.data_ptr(), workspace.generation)


def one_address_allocator(max_rows):
    """A ``torch.empty`` for the workspace that places every allocation at the start
    of one preallocated CPU storage, as an allocator reusing a freed block would."""
    arena = torch.empty(max_rows * WORKSPACE_DIM * 2, dtype=torch.uint8)

    def empty(shape, *, dtype, device):
        size = shape[0] * shape[1] * shape[2] * dtype.itemsize
        return arena[:size].view(dtype).view(shape)

    return empty


class TestSparsePrefillWorkspaceReplacement(CustomTestCase):
    # Each test builds its own workspace: in CI, CustomTestCase retries a failed test
    # without running setUp again, and the retry must start from the same state.

    def old_tensor_alive_at_each_allocation(self, workspace, request):
        """Whether the old tensor was still alive when ``torch.empty`` allocated
        during ``request()``, per call."""
        old = weakref.ref(workspace._buffer)
        seen = []
        allocate = torch.empty

        def observing_empty(*args, **kwargs):
            seen.append(old() is not None)
            return allocate(*args, **kwargs)

        with mock.patch.object(sparse_prefill_utils.torch, "empty", observing_empty):
            request()
        return seen

    def key_across_a_same_address_replacement(self, old, new):
        """The prefix key before and after replacing ``old`` (rows, dtype) by ``new``
        in a fresh workspace whose allocations all land at one address."""
        workspace = SparsePrefillWorkspace(torch.device("cpu"))
        empty = one_address_allocator(max(old[0], new[0]))
        with mock.patch.object(sparse_prefill_utils.torch, "empty", empty):
            rows = workspace.get(*old)
            rows.fill_(1)  # the dequantized prefix of SOURCE
            before = prefix_key(workspace, rows)
            replaced = workspace.get(*new)
        self.assertEqual(replaced.data_ptr(), rows.data_ptr())  # the stand-in's promise
        return before, prefix_key(workspace, replaced)

    def test_growing_releases_the_old_workspace_before_allocating(self):
        workspace = SparsePrefillWorkspace(torch.device("cpu"))
        workspace.get(64)
        seen = self.old_tensor_alive_at_each_allocation(
            workspace, lambda: workspace.get(96)
        )
        self.assertEqual(seen, [False], "64 rows were alive while 96 were allocated")

    def test_changing_dtype_releases_the_old_workspace_before_allocating(self):
        workspace = SparsePrefillWorkspace(torch.device("cpu"))
        workspace.get(96, BF16)
        seen = self.old_tensor_alive_at_each_allocation(
            workspace, lambda: workspace.get(96, FP8)
        )
        self.assertEqual(
            seen, [False], "the bf16 rows were alive while fp8 was allocated"
        )

    def test_growing_at_the_same_address_invalidates_the_cached_prefix(self):
        before, after = self.key_across_a_same_address_replacement(
            (64, BF16), (96, BF16)
        )
        self.assertNotEqual(
            after, before, "a grown workspace at the old address kept the prefix valid"
        )

    def test_changing_dtype_at_the_same_address_invalidates_the_cached_prefix(self):
        before, after = self.key_across_a_same_address_replacement(
            (96, BF16), (96, FP8)
        )
        self.assertNotEqual(
            after, before, "fp8 rows at the old bf16 address kept the prefix valid"
        )

    def test_a_request_that_fits_keeps_the_workspace_and_its_prefix(self):
        workspace = SparsePrefillWorkspace(torch.device("cpu"))
        rows = workspace.get(96)
        before = prefix_key(workspace, rows)
        smaller = workspace.get(64)
        self.assertIs(smaller._base, rows._base)
        self.assertEqual(smaller.shape[0], 64)
        self.assertEqual(prefix_key(workspace, smaller), before)


if __name__ == "__main__":
    unittest.main()
