"""DFlash selector sampling: growing the dense draft-probability buffer must not
hold old and new at once.

``DFlashWorkerV2._selector_sampling_accept`` keeps a dense float32 buffer of
(capacity, gamma, vocab) for DSpark's accept kernel and at least doubles the
capacity when a larger batch arrives. Allocating the replacement while the old
buffer is still referenced makes the growth peak at old + new: at gamma 8 and an
8,192-token vocabulary, 256 -> 257 requests (capacity 512) peaks at 192 MiB where
the new buffer takes 128 MiB. At gamma 15 and a 151,936-token vocabulary the same
doubling from 64 to 128 requests needs 1.63 GiB for a 1.09 GiB buffer.

The peak is read from the CUDA caching allocator's statistics, reset right before
the growth, relative to what the process held before the worker existed: no
allocator cap, so nothing can limit other tests or a resident server. The worker
is built without its constructor (which needs a target model), and DSpark's accept
kernel is stood in for, so the peak is the buffer's alone. Every test builds its
own worker: in CI, CustomTestCase retries a failed test without running setUp
again, and the retry must replay the same growth.
"""

import unittest
from unittest import mock

import torch

from sglang.srt.speculative import dflash_worker_v2
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=50, stage="base-b", runner_config="1-gpu-small")

MIB = 1 << 20
GAMMA, VOCAB, TOP_K = 8, 8192, 2
# Each step's own small tensors (the float copy of q, the stand-in's outputs) fit
# in this much beside the buffer.
STEP_SLACK_MIB = 1


def make_worker():
    worker = DFlashWorkerV2.__new__(DFlashWorkerV2)
    worker._draft_probs_buf = None
    worker._block_verification = False
    return worker


def make_step(bs):
    """One verify step's inputs on the GPU; the logits are never read by the
    stand-in kernel, so they take one token column only."""
    return {
        "candidates": torch.zeros((bs, GAMMA + 1), dtype=torch.int64, device="cuda"),
        "next_token_logits": torch.zeros((1, VOCAB), device="cuda"),
        "candidate_ids": torch.randint(
            VOCAB, (bs, GAMMA, TOP_K), dtype=torch.int64, device="cuda"
        ),
        "q_rows": torch.rand((bs, GAMMA, TOP_K), device="cuda"),
        "sampling_info": None,
        "draft_input": None,
    }


def accept_sampling(*, draft_probs, **kwargs):
    bs = draft_probs.shape[0]
    zeros = torch.zeros(bs, device=draft_probs.device)
    return zeros, zeros, None


def buffer_mib(worker):
    return worker._draft_probs_buf.nbytes / MIB


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestDFlashDraftProbsGrowth(CustomTestCase):
    def test_growing_256_to_257_requests_peaks_at_the_new_128_mib(self):
        small, large = make_step(256), make_step(257)
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        worker = make_worker()
        with mock.patch.object(dflash_worker_v2, "accept_sampling", accept_sampling):
            worker._selector_sampling_accept(**small)
            self.assertEqual(buffer_mib(worker), 64)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            worker._selector_sampling_accept(**large)
            torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - baseline) / MIB
        self.assertEqual(buffer_mib(worker), 128)
        self.assertLessEqual(
            peak,
            128 + STEP_SLACK_MIB,
            f"the growth peaked at {peak:.1f} MiB: the old buffer was still held "
            f"while the new one was allocated",
        )


if __name__ == "__main__":
    unittest.main()
