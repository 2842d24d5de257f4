"""DSA flashmla_sparse_q8 prefill on CPU: each q8kv8 scratch buffer is released before
its replacement is allocated, and the kernel reads only this call's values after a grow.

``DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8`` grows its fp8 q pad, fp8
KV rows and kernel outputs to the exact size a larger batch needs, keeping each old
buffer in a local as well as in the attribute. A torch function mode sees each
allocation: the buffer it replaces must already be dead by then. The backend is built
without its constructor (which needs a model runner); the Triton q cast and the SM90
kernel are stood in for by plain torch. The CUDA test of the method measures the
memory this saves.
"""

import unittest
import weakref
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

from sglang.kernels.ops.attention import sparse_mla_q8kv8_prefill_sm90
from sglang.srt.layers.attention import dsa_backend
from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

FP8 = torch.float8_e4m3fn
D_NOPE, D_ROPE, V_HEAD_DIM, HEADS, TOPK = 16, 8, 16, 16, 128


def make_backend():
    """A backend with no q8kv8 buffer yet, on the plain (no fusion) path."""
    backend = DeepseekSparseAttnBackend.__new__(DeepseekSparseAttnBackend)
    for name in ("identity_scale", "qpad_buf", "topk_pad_buf", "topk_pad_width"):
        setattr(backend, "_q8kv8_" + name, None)
    backend._q8kv8_kv_buf = backend._q8kv8_out_bufs = None
    backend._q8kv8_born_q_stash = None
    backend._q8kv8_topk_length_enabled = False
    backend.dsa_kv_cache_store_fp8 = False
    return backend


def make_call(num_tokens, num_kv_tokens):
    """One prefill layer call's inputs: bf16 q and KV, top-k indices."""
    generator = torch.Generator().manual_seed(num_tokens * 1000 + num_kv_tokens)

    def randn(*shape):
        return torch.randn(shape, generator=generator).to(torch.bfloat16)

    return {
        "q_nope": randn(num_tokens, HEADS, D_NOPE),
        "q_rope": randn(num_tokens, HEADS, D_ROPE),
        "kv_bf16": randn(num_kv_tokens, 1, D_NOPE + D_ROPE),
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


def expected_q(call):
    q_fp8 = torch.zeros((call["q_nope"].shape[0], 64, D_NOPE + D_ROPE), dtype=FP8)
    concat_and_cast_q_fp8_pad(q_fp8, call["q_nope"], call["q_rope"], HEADS)
    return q_fp8.float()


def forward(backend, call):
    """Runs the real method with the cast and kernel stood in; returns copies of the
    q and KV rows the kernel was given."""
    given = []

    def prefill_fwd(*, q, kv, out, max_logits, lse, **kwargs):
        given.append((q.float(), kv.float()))
        return out, max_logits, lse

    with (
        mock.patch.object(
            dsa_backend, "concat_and_cast_q_fp8_pad", concat_and_cast_q_fp8_pad
        ),
        mock.patch.object(
            sparse_mla_q8kv8_prefill_sm90, "sparse_mla_q8kv8_prefill_fwd", prefill_fwd
        ),
    ):
        backend._forward_flashmla_sparse_q8kv8(**call)
    return given[0]


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


class TestDsaQ8kv8ReleaseOrder(CustomTestCase):
    # Each test builds its own backend: CustomTestCase's retry in CI skips setUp.

    def test_more_tokens_release_the_old_q_pad_before_allocating(self):
        backend = make_backend()
        forward(backend, make_call(8, 32))
        backend._q8kv8_qpad_buf.fill_(1.0)  # stale pad heads a grow must not carry over
        call = make_call(12, 32)
        with OnAllocation(torch.zeros, backend._q8kv8_qpad_buf) as mode:
            q_fp8, _ = forward(backend, call)
        self.assertEqual(mode.alive, [False], "the old q pad was alive")
        self.assertTrue(torch.equal(q_fp8, expected_q(call)))

    def test_more_kv_rows_release_the_old_kv_buffer_before_allocating(self):
        backend = make_backend()
        forward(backend, make_call(8, 32))
        backend._q8kv8_kv_buf.fill_(1.0)  # stale rows a grow must not carry over
        call = make_call(8, 48)
        with OnAllocation(torch.empty, backend._q8kv8_kv_buf) as mode:
            _, kv = forward(backend, call)
        self.assertEqual(mode.alive, [False], "the old KV rows were alive")
        expected_kv = torch.zeros((48 + TOPK, D_NOPE + D_ROPE), dtype=FP8)
        expected_kv[:48].copy_(call["kv_bf16"].view(48, -1))
        self.assertTrue(torch.equal(kv.view(48 + TOPK, -1), expected_kv.float()))

    def test_more_tokens_release_the_old_outputs_before_allocating(self):
        backend = make_backend()
        forward(backend, make_call(8, 32))
        call = make_call(12, 32)
        with OnAllocation(torch.empty, backend._q8kv8_out_bufs[0]) as mode:
            forward(backend, call)
        self.assertEqual(mode.alive, [False] * 3, "the old outputs were alive")

    def test_a_call_that_fits_reuses_the_scratch(self):
        backend = make_backend()
        forward(backend, make_call(12, 48))
        before = (
            backend._q8kv8_qpad_buf,
            backend._q8kv8_kv_buf,
            *backend._q8kv8_out_bufs,
        )
        call = make_call(8, 32)
        q_fp8, _ = forward(backend, call)
        after = (
            backend._q8kv8_qpad_buf,
            backend._q8kv8_kv_buf,
            *backend._q8kv8_out_bufs,
        )
        for old, new in zip(before, after):
            self.assertIs(new, old, "a call that fits replaced a scratch buffer")
        self.assertTrue(torch.equal(q_fp8, expected_q(call)))

    def test_a_failed_grow_leaves_a_backend_that_serves_the_next_call(self):
        backend = make_backend()
        forward(backend, make_call(8, 32))
        call = make_call(12, 32)
        with self.assertRaises(RuntimeError):
            with OnAllocation(torch.zeros, backend._q8kv8_qpad_buf, fail=True):
                forward(backend, call)
        q_fp8, _ = forward(backend, call)
        self.assertTrue(torch.equal(q_fp8, expected_q(call)))


if __name__ == "__main__":
    unittest.main()
