"""DSA flashmla_sparse_q8 prefill: growing the q8kv8 scratch needs only its growth.

``DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8`` grows its zero-padded fp8
q (tokens x 64 heads x 576), its kernel outputs (tokens x 64 heads x 512 bf16, two fp32
rows) and its fp8 KV rows ((KV tokens + top-k) x 576) to the exact size a larger batch
needs. 1,024 -> 2,048 tokens at 16 local heads grows the q pad from 36 to 72 MiB and
the outputs from 64.5 to 129 MiB. Allocated while the old buffers are still referenced,
the call allocates 165 MiB beyond what was held; released first, only the 100.5 MiB of
growth. 65,536 -> 131,072 KV rows grows the KV rows by 36 MiB; held, 72 MiB.

The growth is read from the CUDA caching allocator's statistics (the peak allocated
during the call, less what was allocated before it): no allocator cap, so nothing can
limit other tests or a resident server. The backend is built without its constructor
(which needs a model runner); the Triton q cast and the SM90 kernel are stood in for by
plain torch that allocates nothing.
"""

import unittest
from unittest import mock

import torch

from sglang.kernels.ops.attention import sparse_mla_q8kv8_prefill_sm90
from sglang.srt.layers.attention import dsa_backend
from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=15, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
D_NOPE, D_ROPE, V_HEAD_DIM, HEADS, TOPK = 512, 64, 512, 16, 128
# Small tensors a call makes beside the scratch (scales, views).
CALL_SLACK_MIB = 1


def make_backend():
    backend = DeepseekSparseAttnBackend.__new__(DeepseekSparseAttnBackend)
    for name in ("identity_scale", "qpad_buf", "topk_pad_buf", "topk_pad_width"):
        setattr(backend, "_q8kv8_" + name, None)
    backend._q8kv8_kv_buf = backend._q8kv8_out_bufs = None
    backend._q8kv8_born_q_stash = None
    backend._q8kv8_topk_length_enabled = False
    backend.dsa_kv_cache_store_fp8 = False
    return backend


def make_call(num_tokens, num_kv_tokens):
    def randn(*shape):
        return torch.randn(shape, dtype=torch.bfloat16, device="cuda")

    return {
        "q_nope": randn(num_tokens, HEADS, D_NOPE),
        "q_rope": randn(num_tokens, HEADS, D_ROPE),
        "kv_bf16": randn(num_kv_tokens, 1, D_NOPE + D_ROPE),
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
    return sum(b.nbytes for b in buffers + list(backend._q8kv8_out_bufs)) / MIB


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestDsaQ8kv8ScratchGrowth(CustomTestCase):
    # Each test builds its own backend: CustomTestCase's retry in CI skips setUp.

    def assert_grow_allocates_its_growth(self, small, large, growth_mib):
        """Runs ``small`` then ``large`` on a fresh backend: the second call may
        allocate the scratch's growth (``growth_mib``) beyond what was held."""
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
            old = scratch_mib(backend)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            backend._forward_flashmla_sparse_q8kv8(**large)
            torch.cuda.synchronize()
        growth = (torch.cuda.max_memory_allocated() - before) / MIB
        self.assertAlmostEqual(scratch_mib(backend) - old, growth_mib, delta=0.1)
        self.assertLessEqual(
            growth,
            growth_mib + CALL_SLACK_MIB,
            f"the grow allocated {growth:.1f} MiB beyond what was held: an old "
            "buffer was still referenced while its replacement was allocated",
        )

    def test_1024_to_2048_tokens_peaks_at_the_new_scratch(self):
        small, large = make_call(1024, 1024), make_call(2048, 1024)
        self.assert_grow_allocates_its_growth(small, large, 100.5)

    def test_65536_to_131072_kv_rows_peaks_at_the_new_scratch(self):
        small, large = make_call(64, 65536), make_call(64, 131072)
        self.assert_grow_allocates_its_growth(small, large, 36)


if __name__ == "__main__":
    unittest.main()
