"""DSA born-fp8 q: the q8kv8 born-q buffer and its NaN sentinel are each released
before their replacement is allocated, and hold after a grow exactly what they held
before.

With SGLANG_ENABLE_DSA_Q8KV8_BORN_FP8_Q the model writes the padded fp8 q into
``DeepseekSparseAttnBackend.q8kv8_acquire_born_q_buffer``'s buffer (tokens x padded
heads x head_dim, zero pad heads) and passes a NaN-filled bf16 stand-in for q from
``q8kv8_born_q_sentinel``. Both grow to the exact size a larger batch needs, and each
grow keeps the old tensor in a local as well as in the attribute, so the fix must drop
both. These tests watch the order on the real methods without any memory limit: a
weak reference to the old tensor must already be dead when the allocation of the new
one runs. The backend is built without its constructor (which needs a model runner);
only the two fields the methods read are set. The CUDA test in
test/registered/kernels/ops/attention measures the peak the order saves.
"""

import unittest
import weakref
from unittest import mock

import torch

from sglang.srt.layers.attention import dsa_backend
from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=20, suite="base-a-test-cpu")

CPU = torch.device("cpu")
HEADS, HEAD_DIM, V_HEAD_DIM = 16, 24, 16


def make_backend():
    """A backend with no born-q buffer or sentinel yet."""
    backend = DeepseekSparseAttnBackend.__new__(DeepseekSparseAttnBackend)
    backend._q8kv8_born_q_buf = None
    backend._q8kv8_born_q_sentinel = None
    return backend


def acquire(backend, num_tokens, head_dim=HEAD_DIM):
    return backend.q8kv8_acquire_born_q_buffer(num_tokens, HEADS, head_dim, CPU)


def sentinel(backend, num_tokens):
    return backend.q8kv8_born_q_sentinel(num_tokens, HEADS, V_HEAD_DIM, CPU)


class TestDsaQ8kv8BornQReleaseOrder(CustomTestCase):
    # Each test builds its own backend: in CI, CustomTestCase retries a failed test
    # without running setUp again, and the retry must start from the same state.

    def alive_at_allocation(self, backend, attr, allocator, call):
        """For each ``allocator`` call during ``call()``, whether the tensor ``attr``
        held before it was still alive."""
        old = weakref.ref(getattr(backend, attr))
        seen = []
        allocate = getattr(torch, allocator)

        def watch(*args, **kwargs):
            seen.append(old() is not None)
            return allocate(*args, **kwargs)

        with mock.patch.object(dsa_backend.torch, allocator, watch):
            call()
        return seen

    def test_more_tokens_release_the_old_born_q_buffer_before_allocating(self):
        backend = make_backend()
        acquire(backend, 8)
        seen = self.alive_at_allocation(
            backend, "_q8kv8_born_q_buf", "zeros", lambda: acquire(backend, 12)
        )
        self.assertEqual(
            seen, [False], "the old born-q buffer was alive at torch.zeros"
        )
        self.assertEqual(backend._q8kv8_born_q_buf.shape, (12, 64, HEAD_DIM))

    def test_a_new_head_dim_releases_the_old_born_q_buffer_before_allocating(self):
        backend = make_backend()
        acquire(backend, 12)
        seen = self.alive_at_allocation(
            backend,
            "_q8kv8_born_q_buf",
            "zeros",
            lambda: acquire(backend, 8, head_dim=2 * HEAD_DIM),
        )
        self.assertEqual(
            seen, [False], "the old born-q buffer was alive at torch.zeros"
        )
        self.assertEqual(backend._q8kv8_born_q_buf.shape, (8, 64, 2 * HEAD_DIM))

    def test_more_tokens_release_the_old_sentinel_before_allocating(self):
        backend = make_backend()
        sentinel(backend, 8)
        seen = self.alive_at_allocation(
            backend, "_q8kv8_born_q_sentinel", "full", lambda: sentinel(backend, 12)
        )
        self.assertEqual(seen, [False], "the old sentinel was alive at torch.full")
        self.assertEqual(
            backend._q8kv8_born_q_sentinel.numel(), 12 * HEADS * V_HEAD_DIM
        )

    def test_a_call_that_fits_reuses_the_born_q_buffer(self):
        backend = make_backend()
        held = acquire(backend, 12)
        with mock.patch.object(
            dsa_backend.torch, "zeros", side_effect=AssertionError("allocated")
        ):
            smaller = acquire(backend, 8)
        self.assertEqual(smaller.data_ptr(), held.data_ptr())
        self.assertEqual(smaller.shape, (8, 64, HEAD_DIM))

    def test_a_call_that_fits_reuses_the_sentinel(self):
        backend = make_backend()
        held = sentinel(backend, 12)
        with mock.patch.object(
            dsa_backend.torch, "full", side_effect=AssertionError("allocated")
        ):
            smaller = sentinel(backend, 8)
        self.assertEqual(smaller.data_ptr(), held.data_ptr())
        self.assertEqual(smaller.shape, (8, HEADS, V_HEAD_DIM))

    def test_after_a_grow_the_born_q_buffer_is_zero_and_the_sentinel_nan(self):
        backend = make_backend()
        acquire(backend, 8).fill_(1.0)  # rows a grow must not carry over
        sentinel(backend, 8).fill_(1.0)
        q_fp8, q_stand_in = acquire(backend, 12), sentinel(backend, 12)
        self.assertEqual(torch.count_nonzero(q_fp8.float()).item(), 0)
        self.assertTrue(torch.isnan(q_stand_in).all().item())

    def test_a_failed_grow_leaves_a_backend_that_serves_the_next_call(self):
        backend = make_backend()
        acquire(backend, 8)
        sentinel(backend, 8)
        failure = RuntimeError("no memory")
        with mock.patch.object(dsa_backend.torch, "zeros", side_effect=failure):
            with self.assertRaises(RuntimeError):
                acquire(backend, 12)
        with mock.patch.object(dsa_backend.torch, "full", side_effect=failure):
            with self.assertRaises(RuntimeError):
                sentinel(backend, 12)
        self.assertEqual(acquire(backend, 12).shape, (12, 64, HEAD_DIM))
        self.assertEqual(sentinel(backend, 12).shape, (12, HEADS, V_HEAD_DIM))
        self.assertTrue(torch.isnan(backend._q8kv8_born_q_sentinel).all().item())


if __name__ == "__main__":
    unittest.main()
