"""DSA flashmla_sparse_q8 prefill: growing the q8kv8 scratch must not hold old and
new at once.

``DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8`` grows its zero-padded
fp8 q (tokens x 64 heads x 576), its kernel outputs (tokens x 64 heads x 512 bf16,
two fp32 rows) and its fp8 KV rows ((KV tokens + top-k) x 576) to the exact size a
larger batch needs. Allocating each replacement while the old buffer is still
referenced makes the grow peak above the new buffers: 1,024 -> 2,048 tokens at 16
local heads needs 265.5 MiB at once where the new q pad and outputs take 201 MiB.

The peak is read from the CUDA caching allocator's statistics, reset right before
the growing call, relative to what the process held before the backend existed: no
allocator cap, so nothing can limit other tests or a resident server. The backend
is built without its constructor (which needs a model runner), and the Triton q
cast and the SM90 kernel are stood in for by plain torch code that allocates
nothing, so the peak is the scratch buffers' alone. Every test builds its own
backend: in CI, CustomTestCase retries a failed test without running setUp again,
and the retry must replay the same growth.
"""

import unittest
from unittest import mock

import torch

from sglang.kernels.ops.attention import sparse_mla_q8kv8_prefill_sm90
from sglang.srt.layers.attention import dsa_backend
from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=40, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
D_NOPE, D_ROPE, V_HEAD_DIM, HEADS, TOPK = 512, 64, 512, 16, 128
# The identity scale and the views a call makes fit in this much beside the buffers.
CALL_SLACK_MIB = 1


def make_backend():
    backend = DeepseekSparseAttnBackend.__new__(DeepseekSparseAttnBackend)
    backend._q8kv8_identity_scale = None
    backend._q8kv8_qpad_buf = None
    backend._q8kv8_topk_pad_buf = None
    backend._q8kv8_topk_pad_width = None
    backend._q8kv8_kv_buf = None
    backend._q8kv8_topk_length_enabled = False
    backend._q8kv8_out_bufs = None
    backend._q8kv8_born_q_stash = None
    backend.dsa_kv_cache_store_fp8 = False
    return backend


def make_call(num_tokens, num_kv_tokens):
    return {
        "q_nope": torch.randn(
            (num_tokens, HEADS, D_NOPE), dtype=torch.bfloat16, device="cuda"
        ),
        "q_rope": torch.randn(
            (num_tokens, HEADS, D_ROPE), dtype=torch.bfloat16, device="cuda"
        ),
        "kv_bf16": torch.randn(
            (num_kv_tokens, 1, D_NOPE + D_ROPE), dtype=torch.bfloat16, device="cuda"
        ),
        "v_head_dim": V_HEAD_DIM,
        "page_table_1": torch.randint(
            num_kv_tokens, (num_tokens, TOPK), dtype=torch.int32, device="cuda"
        ),
        "sm_scale": 1.0,
    }


def concat_and_cast_q_fp8_pad(q_fp8, q_nope, q_rope, num_heads):
    q_fp8[:, :num_heads, :D_NOPE].copy_(q_nope)
    q_fp8[:, :num_heads, D_NOPE:].copy_(q_rope)


def prefill_fwd(*, out, max_logits, lse, **kwargs):
    return out, max_logits, lse


def scratch_mib(backend):
    buffers = [backend._q8kv8_qpad_buf, backend._q8kv8_kv_buf]
    buffers += list(backend._q8kv8_out_bufs)
    return sum(b.nbytes for b in buffers) / MIB


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestDsaQ8kv8ScratchGrowth(CustomTestCase):
    def grow(self, small, large):
        """Run ``small`` then ``large``; the peak of the second call over what the
        process held before the backend, and the scratch it ends with, in MiB."""
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        backend = make_backend()
        with (
            mock.patch.object(
                dsa_backend, "concat_and_cast_q_fp8_pad", concat_and_cast_q_fp8_pad
            ),
            mock.patch.object(
                sparse_mla_q8kv8_prefill_sm90,
                "sparse_mla_q8kv8_prefill_fwd",
                prefill_fwd,
            ),
        ):
            backend._forward_flashmla_sparse_q8kv8(**small)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            backend._forward_flashmla_sparse_q8kv8(**large)
            torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - baseline) / MIB
        return peak, scratch_mib(backend), backend

    def test_1024_to_2048_tokens_peaks_at_the_new_scratch(self):
        peak, scratch, backend = self.grow(make_call(1024, 1024), make_call(2048, 1024))
        self.assertEqual(backend._q8kv8_qpad_buf.nbytes, 72 * MIB)
        self.assertLessEqual(
            peak,
            scratch + CALL_SLACK_MIB,
            f"the grow peaked at {peak:.1f} MiB for {scratch:.1f} MiB of scratch: "
            "an old buffer was still held while its replacement was allocated",
        )

    def test_65536_to_131072_kv_rows_peaks_at_the_new_scratch(self):
        peak, scratch, backend = self.grow(make_call(64, 65536), make_call(64, 131072))
        self.assertEqual(backend._q8kv8_kv_buf.shape[0], 131072 + TOPK)
        self.assertLessEqual(
            peak,
            scratch + CALL_SLACK_MIB,
            f"the grow peaked at {peak:.1f} MiB for {scratch:.1f} MiB of scratch: "
            "the old KV rows were still held while the new ones were allocated",
        )

    def test_a_call_that_fits_allocates_no_scratch(self):
        torch.cuda.synchronize()
        backend = make_backend()
        large, small = make_call(2048, 1024), make_call(1024, 512)
        with (
            mock.patch.object(
                dsa_backend, "concat_and_cast_q_fp8_pad", concat_and_cast_q_fp8_pad
            ),
            mock.patch.object(
                sparse_mla_q8kv8_prefill_sm90,
                "sparse_mla_q8kv8_prefill_fwd",
                prefill_fwd,
            ),
        ):
            backend._forward_flashmla_sparse_q8kv8(**large)
            before = (backend._q8kv8_qpad_buf, backend._q8kv8_kv_buf)
            torch.cuda.synchronize()
            held = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            backend._forward_flashmla_sparse_q8kv8(**small)
            torch.cuda.synchronize()
        self.assertLessEqual(
            (torch.cuda.max_memory_allocated() - held) / MIB, CALL_SLACK_MIB
        )
        self.assertIs(backend._q8kv8_qpad_buf, before[0])
        self.assertIs(backend._q8kv8_kv_buf, before[1])


if __name__ == "__main__":
    unittest.main()
