"""DSV4 flashmla_sparse_q8 prefill on CPU: the fp8 q pad buffer is released before its
replacement is allocated, and the kernel's q after a grow is exactly this call's.

``DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink`` casts q into a padded fp8 buffer
(tokens x 64 or 128 heads x 512) grown to the exact token count, keeping the old buffer
in a local as well as in the attribute. A torch function mode sees the allocation: the
old buffer must already be dead by then. The backend is built without its constructor
(which needs a model runner); the method's q cast is plain torch. The CUDA test of the
method measures the memory this saves.
"""

import unittest
import weakref

import torch
from torch.overrides import TorchFunctionMode

from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

HEADS, HEAD_DIM = 16, 512


def make_call(num_tokens):
    generator = torch.Generator().manual_seed(num_tokens)
    q = torch.randn((num_tokens, HEADS, HEAD_DIM), generator=generator)
    return q.to(torch.bfloat16), torch.randn(HEADS, generator=generator)


def expected_q(q):
    """The kernel's q for ``q``: the active heads in fp8, the pad heads zero."""
    out = torch.zeros((q.shape[0], 64, HEAD_DIM), dtype=torch.float8_e4m3fn)
    out[:, :HEADS].copy_(q)
    return out.float()


class OnEmpty(TorchFunctionMode):
    """Records at each ``torch.empty`` whether ``old`` is alive."""

    def __init__(self, old):
        super().__init__()
        self.old, self.alive = weakref.ref(old), []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.empty:
            self.alive.append(self.old() is not None)
        return func(*args, **(kwargs or {}))


class TestDsv4Q8kv8QpadReleaseOrder(CustomTestCase):
    # Each test builds its own backend: CustomTestCase's retry in CI skips setUp.

    def test_more_tokens_release_the_old_q_pad_before_allocating(self):
        backend = DeepseekV4AttnBackend.__new__(DeepseekV4AttnBackend)
        backend._prepare_q8kv8_q_and_sink(*make_call(8))
        backend._q8kv8_qpad_buf.fill_(1.0)  # stale heads a grow must not carry over
        call = make_call(12)
        with OnEmpty(backend._q8kv8_qpad_buf) as mode:
            q_fp8 = backend._prepare_q8kv8_q_and_sink(*call)[0]
        self.assertEqual(mode.alive, [False], "the old q pad was alive")
        self.assertTrue(torch.equal(q_fp8.float(), expected_q(call[0])))

    def test_a_call_that_fits_reuses_the_q_pad(self):
        backend = DeepseekV4AttnBackend.__new__(DeepseekV4AttnBackend)
        backend._prepare_q8kv8_q_and_sink(*make_call(12))
        before = backend._q8kv8_qpad_buf
        call = make_call(8)
        q_fp8 = backend._prepare_q8kv8_q_and_sink(*call)[0]
        self.assertIs(backend._q8kv8_qpad_buf, before)
        self.assertTrue(torch.equal(q_fp8.float(), expected_q(call[0])))


if __name__ == "__main__":
    unittest.main()
