"""DSA born-fp8 q: growing the q8kv8 born-q buffer or its NaN sentinel must not hold
old and new at once.

With SGLANG_ENABLE_DSA_Q8KV8_BORN_FP8_Q, ``DeepseekSparseAttnBackend`` grows the
padded fp8 q the model writes into (``q8kv8_acquire_born_q_buffer``: tokens x 64
heads x 576, 36 KiB per token) and the NaN-filled bf16 stand-in for q
(``q8kv8_born_q_sentinel``: tokens x heads x 512, 16 KiB per token at 16 local
heads) to the exact size a larger batch needs. Allocating each replacement while the
old one is still referenced makes the grow peak above the new tensor: 1,024 -> 2,048
tokens needs 108 MiB at once for a 72 MiB born-q buffer, and 48 MiB for a 32 MiB
sentinel.

The peak is read from the CUDA caching allocator's statistics, reset right before
the growing call, relative to what the process held before the backend existed: no
allocator cap, so nothing can limit other tests or a resident server. The backend
is built without its constructor (which needs a model runner); the two methods
allocate nothing but the tensor they grow. Every test builds its own backend: in CI,
CustomTestCase retries a failed test without running setUp again, and the retry must
replay the same growth.
"""

import unittest

import torch

from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=40, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
HEADS, HEAD_DIM, V_HEAD_DIM = 16, 576, 512


def make_backend():
    backend = DeepseekSparseAttnBackend.__new__(DeepseekSparseAttnBackend)
    backend._q8kv8_born_q_buf = None
    backend._q8kv8_born_q_sentinel = None
    return backend


def acquire(backend, num_tokens):
    device = torch.device("cuda")
    return backend.q8kv8_acquire_born_q_buffer(num_tokens, HEADS, HEAD_DIM, device)


def sentinel(backend, num_tokens):
    device = torch.device("cuda")
    return backend.q8kv8_born_q_sentinel(num_tokens, HEADS, V_HEAD_DIM, device)


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestDsaQ8kv8BornQGrowth(CustomTestCase):
    def grow(self, method, small, large):
        """Call ``method`` for ``small`` then ``large`` tokens on a new backend; the
        peak of the second call over what the process held before the backend, in
        MiB, and the backend."""
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        backend = make_backend()
        method(backend, small)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        method(backend, large)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - baseline) / MIB, backend

    def test_1024_to_2048_tokens_peaks_at_the_new_72_mib_born_q_buffer(self):
        peak, backend = self.grow(acquire, 1024, 2048)
        self.assertEqual(backend._q8kv8_born_q_buf.nbytes, 72 * MIB)
        self.assertLessEqual(
            peak,
            72,
            f"the grow peaked at {peak:.1f} MiB for a 72 MiB born-q buffer: the old "
            "buffer was still held while its replacement was allocated",
        )

    def test_1024_to_2048_tokens_peaks_at_the_new_32_mib_sentinel(self):
        peak, backend = self.grow(sentinel, 1024, 2048)
        self.assertEqual(backend._q8kv8_born_q_sentinel.nbytes, 32 * MIB)
        self.assertLessEqual(
            peak,
            32,
            f"the grow peaked at {peak:.1f} MiB for a 32 MiB sentinel: the old "
            "sentinel was still held while its replacement was allocated",
        )

    def test_a_call_that_fits_allocates_nothing(self):
        torch.cuda.synchronize()
        backend = make_backend()
        acquire(backend, 2048)
        sentinel(backend, 2048)
        before = (backend._q8kv8_born_q_buf, backend._q8kv8_born_q_sentinel)
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        acquire(backend, 1024)
        sentinel(backend, 1024)
        torch.cuda.synchronize()
        self.assertEqual(torch.cuda.max_memory_allocated(), held)
        self.assertIs(backend._q8kv8_born_q_buf, before[0])
        self.assertIs(backend._q8kv8_born_q_sentinel, before[1])


if __name__ == "__main__":
    unittest.main()
