"""DSA born-fp8 q on CPU: the q8kv8 born-q buffer and its NaN sentinel are each
released before their replacement is allocated.

With SGLANG_ENABLE_DSA_Q8KV8_BORN_FP8_Q the model writes the padded fp8 q into
``DeepseekSparseAttnBackend.q8kv8_acquire_born_q_buffer``'s buffer (zero pad heads) and
passes a NaN-filled bf16 stand-in for q from ``q8kv8_born_q_sentinel``. Both grow to
the exact size a larger batch needs, keeping the old tensor in a local as well as in
the attribute. A torch function mode sees each allocation: the tensor it replaces must
already be dead by then. The backend is built without its constructor (which needs a
model runner); the CUDA test of the methods measures the memory this saves.
"""

import unittest
import weakref

import torch
from torch.overrides import TorchFunctionMode

from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

CPU = torch.device("cpu")
HEADS, HEAD_DIM, V_HEAD_DIM = 16, 24, 16


def make_backend():
    backend = DeepseekSparseAttnBackend.__new__(DeepseekSparseAttnBackend)
    backend._q8kv8_born_q_buf = backend._q8kv8_born_q_sentinel = None
    return backend


def acquire(backend, num_tokens, head_dim=HEAD_DIM):
    return backend.q8kv8_acquire_born_q_buffer(num_tokens, HEADS, head_dim, CPU)


def sentinel(backend, num_tokens):
    return backend.q8kv8_born_q_sentinel(num_tokens, HEADS, V_HEAD_DIM, CPU)


class OnAllocation(TorchFunctionMode):
    """Records at each call of ``func`` whether ``old`` is alive; raises if ``fail``."""

    def __init__(self, func, old, fail=False):
        super().__init__()
        self.func, self.old, self.fail, self.alive = func, weakref.ref(old), fail, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is self.func:
            self.alive.append(self.old() is not None)
            if self.fail:
                raise RuntimeError("out of memory")
        return func(*args, **(kwargs or {}))


class TestDsaQ8kv8BornQReleaseOrder(CustomTestCase):
    # Each test builds its own backend: CustomTestCase's retry in CI skips setUp.

    def test_more_tokens_release_the_old_born_q_buffer_before_allocating(self):
        backend = make_backend()
        acquire(backend, 8).fill_(1.0)  # rows a grow must not carry over
        with OnAllocation(torch.zeros, backend._q8kv8_born_q_buf) as mode:
            q_fp8 = acquire(backend, 12)
        self.assertEqual(mode.alive, [False], "the old born-q buffer was alive")
        self.assertEqual(torch.count_nonzero(q_fp8.float()).item(), 0)

    def test_a_new_head_dim_releases_the_old_born_q_buffer_before_allocating(self):
        backend = make_backend()
        acquire(backend, 12)
        with OnAllocation(torch.zeros, backend._q8kv8_born_q_buf) as mode:
            acquire(backend, 8, head_dim=2 * HEAD_DIM)
        self.assertEqual(mode.alive, [False], "the old born-q buffer was alive")

    def test_more_tokens_release_the_old_sentinel_before_allocating(self):
        backend = make_backend()
        sentinel(backend, 8).fill_(1.0)
        with OnAllocation(torch.full, backend._q8kv8_born_q_sentinel) as mode:
            q_stand_in = sentinel(backend, 12)
        self.assertEqual(mode.alive, [False], "the old sentinel was alive")
        self.assertTrue(torch.isnan(q_stand_in).all().item())

    def test_a_call_that_fits_reuses_the_born_q_buffer(self):
        backend = make_backend()
        held = acquire(backend, 12)
        self.assertEqual(acquire(backend, 8).data_ptr(), held.data_ptr())

    def test_a_call_that_fits_reuses_the_sentinel(self):
        backend = make_backend()
        held = sentinel(backend, 12)
        self.assertEqual(sentinel(backend, 8).data_ptr(), held.data_ptr())

    def test_a_failed_grow_leaves_a_backend_that_serves_the_next_call(self):
        backend = make_backend()
        acquire(backend, 8)
        sentinel(backend, 8)
        with self.assertRaises(RuntimeError):
            with OnAllocation(torch.zeros, backend._q8kv8_born_q_buf, fail=True):
                acquire(backend, 12)
        with self.assertRaises(RuntimeError):
            with OnAllocation(torch.full, backend._q8kv8_born_q_sentinel, fail=True):
                sentinel(backend, 12)
        self.assertEqual(acquire(backend, 12).shape, (12, 64, HEAD_DIM))
        self.assertTrue(torch.isnan(sentinel(backend, 12)).all().item())


if __name__ == "__main__":
    unittest.main()
