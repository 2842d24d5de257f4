"""DSA flashmla_sparse_q8 prefill: each q8kv8 scratch buffer is released before its
replacement is allocated, and holds after a grow exactly what it held before.

``DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8`` grows its fp8 q pad,
fp8 KV rows and kernel outputs to the exact size a larger batch needs. Each grow
keeps the old buffer in a local as well as in the attribute, so the fix must drop
both. These tests watch the order on the real method without
any memory limit: a weak reference to the old buffer must already be dead when
the allocation of the new one runs, and a call that fits keeps all three. The
backend is built without its constructor (which needs a model runner); only the
fields the method reads are set. The Triton q cast and the SM90 kernel are stood
in for at their module boundary by plain torch code, so the method runs on CPU;
the CUDA test in test/registered/kernels/ops/attention measures the peak the
order saves.
"""

import unittest
import weakref
from unittest import mock

import torch

from sglang.kernels.ops.attention import sparse_mla_q8kv8_prefill_sm90
from sglang.srt.layers.attention import dsa_backend
from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=20, suite="base-a-test-cpu")

FP8 = torch.float8_e4m3fn
D_NOPE, D_ROPE, V_HEAD_DIM, HEADS, TOPK = 16, 8, 16, 16, 128


def make_backend():
    """A backend with no q8kv8 buffer yet, on the plain (no fusion) path."""
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
    """One prefill layer call's inputs: bf16 q and KV, top-k indices."""
    generator = torch.Generator().manual_seed(num_tokens * 1000 + num_kv_tokens)
    head_dim = D_NOPE + D_ROPE
    return {
        "q_nope": torch.randn(
            (num_tokens, HEADS, D_NOPE), generator=generator, dtype=torch.bfloat16
        ),
        "q_rope": torch.randn(
            (num_tokens, HEADS, D_ROPE), generator=generator, dtype=torch.bfloat16
        ),
        "kv_bf16": torch.randn(
            (num_kv_tokens, 1, head_dim), generator=generator, dtype=torch.bfloat16
        ),
        "v_head_dim": V_HEAD_DIM,
        "page_table_1": torch.randint(
            num_kv_tokens, (num_tokens, TOPK), generator=generator, dtype=torch.int32
        ),
        "sm_scale": 1.0,
    }


def concat_and_cast_q_fp8_pad(q_fp8, q_nope, q_rope, num_heads):
    """The Triton cast's contract: the active heads get the concatenated q in fp8."""
    q_fp8[:, :num_heads, :D_NOPE].copy_(q_nope)
    q_fp8[:, :num_heads, D_NOPE:].copy_(q_rope)


class TestDsaQ8kv8ReleaseOrder(CustomTestCase):
    # Each test builds its own backend: in CI, CustomTestCase retries a failed test
    # without running setUp again, and the retry must start from the same state.

    def forward(self, backend, call):
        """Run the real method with the cast and kernel stood in; returns copies of
        the q and KV rows the kernel was given."""
        given = []

        def prefill_fwd(*, q, kv, out, max_logits, lse, **kwargs):
            given.append((q.clone(), kv.clone()))
            return out, max_logits, lse

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
            backend._forward_flashmla_sparse_q8kv8(**call)
        self.assertEqual(len(given), 1)
        return given[0]

    def alive_at_allocation(self, backend, call, attr, allocator):
        """For each ``allocator`` call during the layer call, whether the buffer
        ``attr`` held before it was still alive."""
        held = getattr(backend, attr)
        old = weakref.ref(held[0] if isinstance(held, tuple) else held)
        del held
        seen = []
        allocate = getattr(torch, allocator)

        def watch(*args, **kwargs):
            seen.append(old() is not None)
            return allocate(*args, **kwargs)

        with mock.patch.object(dsa_backend.torch, allocator, watch):
            self.forward(backend, call)
        return seen

    def test_more_tokens_release_the_old_q_pad_before_allocating(self):
        backend = make_backend()
        self.forward(backend, make_call(8, 32))
        seen = self.alive_at_allocation(
            backend, make_call(12, 32), "_q8kv8_qpad_buf", "zeros"
        )
        self.assertEqual(seen, [False], "the old q pad was alive at the allocation")
        self.assertEqual(backend._q8kv8_qpad_buf.shape, (12, 64, D_NOPE + D_ROPE))

    def test_more_kv_rows_release_the_old_kv_buffer_before_allocating(self):
        backend = make_backend()
        self.forward(backend, make_call(8, 32))
        seen = self.alive_at_allocation(
            backend, make_call(8, 48), "_q8kv8_kv_buf", "empty"
        )
        self.assertEqual(seen, [False], "the old KV rows were alive at the allocation")
        self.assertEqual(backend._q8kv8_kv_buf.shape, (48 + TOPK, D_NOPE + D_ROPE))

    def test_more_tokens_release_the_old_outputs_before_allocating(self):
        backend = make_backend()
        self.forward(backend, make_call(8, 32))
        seen = self.alive_at_allocation(
            backend, make_call(12, 32), "_q8kv8_out_bufs", "empty"
        )
        self.assertEqual(
            seen, [False, False, False], "the old outputs were alive at the allocation"
        )
        self.assertEqual(backend._q8kv8_out_bufs[0].shape, (12, 64, V_HEAD_DIM))

    def test_a_call_that_fits_reuses_the_scratch(self):
        backend = make_backend()
        self.forward(backend, make_call(12, 48))
        before = (backend._q8kv8_qpad_buf, backend._q8kv8_kv_buf)
        before += backend._q8kv8_out_bufs
        call = make_call(8, 32)
        q_fp8, _ = self.forward(backend, call)
        after = (backend._q8kv8_qpad_buf, backend._q8kv8_kv_buf)
        after += backend._q8kv8_out_bufs
        for old, new in zip(before, after):
            self.assertIs(new, old, "a call that fits replaced a scratch buffer")
        expected_q = torch.zeros((8, 64, D_NOPE + D_ROPE), dtype=FP8)
        concat_and_cast_q_fp8_pad(expected_q, call["q_nope"], call["q_rope"], HEADS)
        self.assertTrue(torch.equal(q_fp8.float(), expected_q.float()))

    def test_after_a_grow_the_kernel_reads_zero_pads_and_this_calls_rows(self):
        backend = make_backend()
        self.forward(backend, make_call(12, 48))
        for buf in (backend._q8kv8_qpad_buf, backend._q8kv8_kv_buf):
            buf.fill_(1.0)  # stale rows a grow must not carry over
        call = make_call(16, 64)
        q_fp8, kv = self.forward(backend, call)
        expected_q = torch.zeros((16, 64, D_NOPE + D_ROPE), dtype=FP8)
        concat_and_cast_q_fp8_pad(expected_q, call["q_nope"], call["q_rope"], HEADS)
        self.assertTrue(torch.equal(q_fp8.float(), expected_q.float()))
        expected_kv = torch.zeros((64 + TOPK, D_NOPE + D_ROPE), dtype=FP8)
        expected_kv[:64].copy_(call["kv_bf16"].view(64, -1))
        self.assertTrue(
            torch.equal(kv.view(64 + TOPK, -1).float(), expected_kv.float())
        )

    def test_a_failed_grow_leaves_a_backend_that_serves_the_next_call(self):
        backend = make_backend()
        self.forward(backend, make_call(8, 32))
        with mock.patch.object(
            dsa_backend.torch, "zeros", side_effect=RuntimeError("no memory")
        ):
            with self.assertRaises(RuntimeError):
                self.forward(backend, make_call(12, 32))
        call = make_call(12, 32)
        q_fp8, _ = self.forward(backend, call)
        expected_q = torch.zeros((12, 64, D_NOPE + D_ROPE), dtype=FP8)
        concat_and_cast_q_fp8_pad(expected_q, call["q_nope"], call["q_rope"], HEADS)
        self.assertTrue(torch.equal(q_fp8.float(), expected_q.float()))


if __name__ == "__main__":
    unittest.main()
