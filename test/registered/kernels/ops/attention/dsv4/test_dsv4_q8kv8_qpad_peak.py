"""DSV4 flashmla_sparse_q8 prefill: growing the fp8 q pad buffer must not hold old
and new at once.

``DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink`` casts q into a padded fp8
buffer (tokens x 64 heads x 512 at up to 64 local heads, 32 KiB per token) grown
to the exact token count, so every larger prefill batch replaces it. Allocating
the replacement while the old buffer is still referenced makes the grow peak at
old + new: 2,048 -> 4,096 tokens needs 192 MiB at once for a 128 MiB buffer.

The peak is read from the CUDA caching allocator's statistics, reset right before
the growing call, relative to what the process held before the backend existed: no
allocator cap, so nothing can limit other tests or a resident server. The backend
is built without its constructor (which needs a model runner); the method's q cast
is plain torch and allocates nothing beyond a scalar. Every test builds its own
backend: in CI, CustomTestCase retries a failed test without running setUp again,
and the retry must replay the same growth.
"""

import unittest

import torch

from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=50, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
HEADS, HEAD_DIM = 16, 512
# The sink pad and the scales fit in this much beside the buffer.
CALL_SLACK_MIB = 1


def make_call(num_tokens):
    q = torch.randn((num_tokens, HEADS, HEAD_DIM), dtype=torch.bfloat16, device="cuda")
    return q, torch.randn(HEADS, device="cuda")


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestDsv4Q8kv8QpadGrowth(CustomTestCase):
    def test_2048_to_4096_tokens_peaks_at_the_new_128_mib(self):
        small, large = make_call(2048), make_call(4096)
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        backend = DeepseekV4AttnBackend.__new__(DeepseekV4AttnBackend)
        backend._prepare_q8kv8_q_and_sink(*small)
        self.assertEqual(backend._q8kv8_qpad_buf.nbytes, 64 * MIB)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        backend._prepare_q8kv8_q_and_sink(*large)
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - baseline) / MIB
        self.assertEqual(backend._q8kv8_qpad_buf.nbytes, 128 * MIB)
        self.assertLessEqual(
            peak,
            128 + CALL_SLACK_MIB,
            f"the grow peaked at {peak:.1f} MiB: the old q pad was still held "
            "while the new one was allocated",
        )

    def test_a_call_that_fits_allocates_no_q_pad(self):
        large, small = make_call(4096), make_call(2048)
        backend = DeepseekV4AttnBackend.__new__(DeepseekV4AttnBackend)
        backend._prepare_q8kv8_q_and_sink(*large)
        before = backend._q8kv8_qpad_buf
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        backend._prepare_q8kv8_q_and_sink(*small)
        torch.cuda.synchronize()
        self.assertLessEqual(
            (torch.cuda.max_memory_allocated() - held) / MIB, CALL_SLACK_MIB
        )
        self.assertIs(backend._q8kv8_qpad_buf, before)


if __name__ == "__main__":
    unittest.main()
