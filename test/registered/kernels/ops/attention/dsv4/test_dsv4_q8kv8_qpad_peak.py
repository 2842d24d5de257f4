"""DSV4 flashmla_sparse_q8 prefill: growing the fp8 q pad buffer needs only its growth.

``DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink`` casts q into a padded fp8 buffer
(tokens x 64 heads x 512 at up to 64 local heads, 32 KiB per token) grown to the exact
token count, so every larger prefill batch replaces it. 2,048 -> 4,096 tokens grows it
from 64 to 128 MiB. Allocated while the old buffer is still referenced, the call
allocates 128 MiB beyond what was held (192 MiB in all); released first, only the 64
MiB of growth.

The growth is read from the CUDA caching allocator's statistics (the peak allocated
during the call, less what was allocated before it): no allocator cap, so nothing can
limit other tests or a resident server. The backend is built without its constructor
(which needs a model runner); the method's q cast is plain torch.
"""

import unittest

import torch

from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=15, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
HEADS, HEAD_DIM = 16, 512
# The sink pad and the scales a call makes beside the buffer.
CALL_SLACK_MIB = 1


def make_call(num_tokens):
    q = torch.randn((num_tokens, HEADS, HEAD_DIM), dtype=torch.bfloat16, device="cuda")
    return q, torch.randn(HEADS, device="cuda")


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestDsv4Q8kv8QpadGrowth(CustomTestCase):
    # The test builds its own backend: CustomTestCase's retry in CI skips setUp.

    def test_2048_to_4096_tokens_peaks_at_the_new_128_mib(self):
        small, large = make_call(2048), make_call(4096)
        backend = DeepseekV4AttnBackend.__new__(DeepseekV4AttnBackend)
        backend._prepare_q8kv8_q_and_sink(*small)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        backend._prepare_q8kv8_q_and_sink(*large)
        torch.cuda.synchronize()
        growth = (torch.cuda.max_memory_allocated() - before) / MIB
        self.assertEqual(backend._q8kv8_qpad_buf.nbytes, 128 * MIB)
        self.assertLessEqual(
            growth,
            64 + CALL_SLACK_MIB,
            f"the grow allocated {growth:.1f} MiB beyond what was held: the old "
            "q pad was still referenced while the new one was allocated",
        )


if __name__ == "__main__":
    unittest.main()
