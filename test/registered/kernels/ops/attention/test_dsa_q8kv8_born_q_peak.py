"""DSA born-fp8 q: growing the q8kv8 born-q buffer or its NaN sentinel needs only its
growth.

With SGLANG_ENABLE_DSA_Q8KV8_BORN_FP8_Q, ``DeepseekSparseAttnBackend`` grows the padded
fp8 q the model writes into (``q8kv8_acquire_born_q_buffer``: tokens x 64 heads x 576,
36 KiB per token) and the NaN-filled bf16 stand-in for q (``q8kv8_born_q_sentinel``:
tokens x heads x 512, 16 KiB per token at 16 local heads) to the exact size a larger
batch needs. 1,024 -> 2,048 tokens grows the born-q buffer from 36 to 72 MiB and the
sentinel from 16 to 32 MiB. Allocated while the old tensor is still referenced, the
call allocates the whole new tensor beyond what was held; released first, only the
growth.

The growth is read from the CUDA caching allocator's statistics (the peak allocated
during the call, less what was allocated before it): no allocator cap, so nothing can
limit other tests or a resident server. The backend is built without its constructor
(which needs a model runner).
"""

import unittest

import torch

from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=15, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
CUDA = torch.device("cuda")
HEADS, HEAD_DIM, V_HEAD_DIM = 16, 576, 512


def acquire(backend, num_tokens):
    return backend.q8kv8_acquire_born_q_buffer(num_tokens, HEADS, HEAD_DIM, CUDA)


def sentinel(backend, num_tokens):
    return backend.q8kv8_born_q_sentinel(num_tokens, HEADS, V_HEAD_DIM, CUDA)


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestDsaQ8kv8BornQGrowth(CustomTestCase):
    # Each test builds its own backend: CustomTestCase's retry in CI skips setUp.

    def assert_grow_allocates_mib(self, method, growth_mib):
        """Calls ``method`` for 1,024 then 2,048 tokens on a fresh backend: the second
        call may allocate ``growth_mib`` beyond what was held."""
        backend = DeepseekSparseAttnBackend.__new__(DeepseekSparseAttnBackend)
        backend._q8kv8_born_q_buf = backend._q8kv8_born_q_sentinel = None
        method(backend, 1024)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        grown = method(backend, 2048)
        torch.cuda.synchronize()
        growth = (torch.cuda.max_memory_allocated() - before) / MIB
        self.assertEqual(grown.nbytes, 2 * growth_mib * MIB)
        self.assertLessEqual(
            growth,
            growth_mib,
            f"the grow allocated {growth:.1f} MiB beyond what was held: the old "
            "tensor was still referenced while its replacement was allocated",
        )

    def test_1024_to_2048_tokens_peaks_at_the_new_72_mib_born_q_buffer(self):
        self.assert_grow_allocates_mib(acquire, 36)

    def test_1024_to_2048_tokens_peaks_at_the_new_32_mib_sentinel(self):
        self.assert_grow_allocates_mib(sentinel, 16)


if __name__ == "__main__":
    unittest.main()
