"""DSV4 flashmla_sparse_q8 prefill: the fp8 q pad buffer is released before its
replacement is allocated, and the kernel's q after a grow is exactly this call's.

``DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink`` casts q into a padded fp8
buffer (tokens x 64 or 128 heads x 512) grown to the exact token count, keeping
the old buffer in a local as well as in the attribute, so the fix must drop both.
These tests watch the order on the real method without any memory limit: a weak
reference to the old buffer must already be dead when ``torch.empty`` allocates
the new one. The backend is built without its constructor (which needs a model
runner); the method reads only its own q8kv8 fields, and its q cast is plain
torch, so it runs on CPU. The CUDA test in test/registered/kernels/ops/attention/dsv4
measures the peak the order saves.
"""

import unittest
import weakref
from unittest import mock

import torch

from sglang.srt.layers.attention import deepseek_v4_backend
from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=35, suite="base-a-test-cpu")

HEADS, HEAD_DIM = 16, 512


def make_call(num_tokens):
    generator = torch.Generator().manual_seed(num_tokens)
    q = torch.randn((num_tokens, HEADS, HEAD_DIM), generator=generator)
    return q.to(torch.bfloat16), torch.randn(HEADS, generator=generator)


def expected_q(q):
    """The kernel's q for ``q``: the active heads in fp8, the pad heads zero."""
    out = torch.zeros((q.shape[0], 64, HEAD_DIM), dtype=torch.float8_e4m3fn)
    out[:, :HEADS].copy_(q)
    return out


class TestDsv4Q8kv8QpadReleaseOrder(CustomTestCase):
    # Each test builds its own backend: in CI, CustomTestCase retries a failed test
    # without running setUp again, and the retry must start from the same state.

    def alive_at_allocation(self, backend, call):
        old = weakref.ref(backend._q8kv8_qpad_buf)
        seen = []
        allocate = torch.empty

        def empty(*args, **kwargs):
            seen.append(old() is not None)
            return allocate(*args, **kwargs)

        with mock.patch.object(deepseek_v4_backend.torch, "empty", empty):
            q_fp8 = backend._prepare_q8kv8_q_and_sink(*call)[0]
        return seen, q_fp8

    def test_more_tokens_release_the_old_q_pad_before_allocating(self):
        backend = DeepseekV4AttnBackend.__new__(DeepseekV4AttnBackend)
        backend._prepare_q8kv8_q_and_sink(*make_call(8))
        seen, _ = self.alive_at_allocation(backend, make_call(12))
        self.assertEqual(seen, [False], "the old q pad was alive at the allocation")
        self.assertEqual(backend._q8kv8_qpad_buf.shape, (12, 64, HEAD_DIM))

    def test_after_a_grow_the_kernel_reads_zero_pads_and_this_calls_q(self):
        backend = DeepseekV4AttnBackend.__new__(DeepseekV4AttnBackend)
        backend._prepare_q8kv8_q_and_sink(*make_call(8))
        backend._q8kv8_qpad_buf.fill_(1.0)  # stale heads a grow must not carry over
        call = make_call(12)
        _, q_fp8 = self.alive_at_allocation(backend, call)
        self.assertTrue(torch.equal(q_fp8.float(), expected_q(call[0]).float()))

    def test_a_call_that_fits_reuses_the_q_pad(self):
        backend = DeepseekV4AttnBackend.__new__(DeepseekV4AttnBackend)
        backend._prepare_q8kv8_q_and_sink(*make_call(12))
        before = backend._q8kv8_qpad_buf
        call = make_call(8)
        seen, q_fp8 = self.alive_at_allocation(backend, call)
        self.assertEqual(seen, [])
        self.assertIs(backend._q8kv8_qpad_buf, before)
        self.assertTrue(torch.equal(q_fp8.float(), expected_q(call[0]).float()))

    def test_a_failed_grow_leaves_a_backend_that_serves_the_next_call(self):
        backend = DeepseekV4AttnBackend.__new__(DeepseekV4AttnBackend)
        backend._prepare_q8kv8_q_and_sink(*make_call(8))
        with mock.patch.object(
            deepseek_v4_backend.torch, "empty", side_effect=RuntimeError("no memory")
        ):
            with self.assertRaises(RuntimeError):
                backend._prepare_q8kv8_q_and_sink(*make_call(12))
        call = make_call(12)
        q_fp8 = backend._prepare_q8kv8_q_and_sink(*call)[0]
        self.assertTrue(torch.equal(q_fp8.float(), expected_q(call[0]).float()))


if __name__ == "__main__":
    unittest.main()
