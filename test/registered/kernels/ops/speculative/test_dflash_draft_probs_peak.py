"""DFlash selector sampling: growing the dense draft-probability buffer needs only its
growth.

``DFlashWorkerV2._selector_sampling_accept`` keeps a dense float32 buffer of
(capacity, gamma, vocab) for DSpark's accept kernel and at least doubles the capacity
when a larger batch arrives. At gamma 8 and an 8,192-token vocabulary, 256 -> 257
requests grows it from 64 to 128 MiB. Allocated while the old buffer is still
referenced, the call allocates 128 MiB beyond what was held (192 MiB in all); released
first, only the 64 MiB of growth.

The growth is read from the CUDA caching allocator's statistics (the peak allocated
during the call, less what was allocated before it): no allocator cap, so nothing can
limit other tests or a resident server. The worker is built without its constructor
(which needs a target model), and DSpark's accept kernel is stood in for.
"""

import unittest
from unittest import mock

import torch

from sglang.srt.speculative import dflash_worker_v2
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=15, stage="base-b-kernel-unit", runner_config="1-gpu-large")

MIB = 1 << 20
GAMMA, VOCAB, TOP_K = 8, 8192, 2
# The step's own small tensors (the float copy of q, the stand-in's outputs).
STEP_SLACK_MIB = 1


def make_step(bs):
    """One verify step's inputs; the stand-in kernel reads no logits."""
    return {
        "candidates": torch.zeros((bs, GAMMA + 1), dtype=torch.int64, device="cuda"),
        "next_token_logits": torch.zeros((1, VOCAB), device="cuda"),
        "candidate_ids": torch.randint(VOCAB, (bs, GAMMA, TOP_K), device="cuda"),
        "q_rows": torch.rand((bs, GAMMA, TOP_K), device="cuda"),
        "sampling_info": None,
        "draft_input": None,
    }


def accept_sampling(*, draft_probs, **kwargs):
    zeros = draft_probs.new_zeros(draft_probs.shape[0])
    return zeros, zeros, None


@unittest.skipUnless(torch.cuda.is_available(), "reads the CUDA allocator's peak")
class TestDFlashDraftProbsGrowth(CustomTestCase):
    # The test builds its own worker: CustomTestCase's retry in CI skips setUp.

    def test_growing_256_to_257_requests_peaks_at_the_new_128_mib(self):
        worker = DFlashWorkerV2.__new__(DFlashWorkerV2)
        worker._draft_probs_buf = None
        worker._block_verification = False
        small, large = make_step(256), make_step(257)
        with mock.patch.object(dflash_worker_v2, "accept_sampling", accept_sampling):
            worker._selector_sampling_accept(**small)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            worker._selector_sampling_accept(**large)
            torch.cuda.synchronize()
        growth = (torch.cuda.max_memory_allocated() - before) / MIB
        self.assertEqual(worker._draft_probs_buf.nbytes, 128 * MIB)
        self.assertLessEqual(
            growth,
            64 + STEP_SLACK_MIB,
            f"the growth allocated {growth:.1f} MiB beyond what was held: the old "
            "buffer was still referenced while the new one was allocated",
        )


if __name__ == "__main__":
    unittest.main()
