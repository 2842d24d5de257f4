"""DFlash selector sampling: the dense draft-probability buffer is released before
its replacement is allocated.

``DFlashWorkerV2._selector_sampling_accept`` scatters the selector's sparse draft
probabilities into a dense float32 buffer of (capacity, gamma, vocab) and at least
doubles the capacity when a larger batch arrives (or allocates anew when gamma or
the vocabulary changes). If the replacement is allocated while the worker (or the
method's local) still references the old buffer, old and new are alive at once.

These tests watch the order on the real method without any memory limit: a weak
reference to the old buffer must already be dead when ``torch.zeros`` allocates the
new one. The worker is built without its constructor (which needs a target model);
only the fields the method reads are set, and DSpark's accept kernel is replaced by
a stand-in that records the dense probabilities it is given. The CUDA test beside
this file measures the peak that order saves.
"""

import unittest
import weakref
from unittest import mock

import torch

from sglang.srt.speculative import dflash_worker_v2
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=45, suite="base-a-test-cpu")

TOP_K = 2


def make_worker():
    """A worker with no draft-probability buffer yet."""
    worker = DFlashWorkerV2.__new__(DFlashWorkerV2)
    worker._draft_probs_buf = None
    worker._block_verification = False
    return worker


def make_step(bs, gamma, vocab):
    """One verify step's inputs: bs rows of gamma + 1 candidates, and for each draft
    position TOP_K distinct token ids with their probabilities."""
    generator = torch.Generator().manual_seed(bs * 1000 + gamma * 10 + vocab)
    ids = torch.stack(
        [torch.randperm(vocab, generator=generator)[:TOP_K] for _ in range(bs * gamma)]
    ).view(bs, gamma, TOP_K)
    return {
        "candidates": torch.zeros((bs, gamma + 1), dtype=torch.int64),
        "next_token_logits": torch.zeros((bs * (gamma + 1), vocab)),
        "candidate_ids": ids,
        "q_rows": torch.rand((bs, gamma, TOP_K), generator=generator),
        "sampling_info": None,
        "draft_input": None,
    }


class TestDFlashDraftProbsReleaseOrder(CustomTestCase):
    # Each test builds its own worker: in CI, CustomTestCase retries a failed test
    # without running setUp again, and the retry must start from the same state.

    def accept(self, worker, step):
        """Run the real method with DSpark's kernel stood in; returns the dense
        probabilities the kernel was given (a copy)."""
        given = []

        def accept_sampling(*, draft_probs, **kwargs):
            given.append(draft_probs.clone())
            bs = draft_probs.shape[0]
            return draft_probs.new_zeros(bs), draft_probs.new_zeros(bs), None

        with mock.patch.object(dflash_worker_v2, "accept_sampling", accept_sampling):
            worker._selector_sampling_accept(**step)
        self.assertEqual(len(given), 1)
        return given[0]

    def old_buffer_alive_at_allocation(self, worker, step):
        """For each ``torch.zeros`` call during the step, whether the old buffer was
        still alive."""
        old = weakref.ref(worker._draft_probs_buf)
        seen = []
        allocate = torch.zeros

        def zeros(*args, **kwargs):
            seen.append(old() is not None)
            return allocate(*args, **kwargs)

        with mock.patch.object(dflash_worker_v2.torch, "zeros", zeros):
            self.accept(worker, step)
        return seen

    def test_growing_the_batch_releases_the_old_buffer_before_allocating(self):
        worker = make_worker()
        self.accept(worker, make_step(2, 3, 64))
        seen = self.old_buffer_alive_at_allocation(worker, make_step(3, 3, 64))
        self.assertEqual(
            seen, [False], "the old buffer was alive while the new one was allocated"
        )
        self.assertEqual(worker._draft_probs_buf.shape, (4, 3, 64))

    def test_changing_gamma_releases_the_old_buffer_before_allocating(self):
        worker = make_worker()
        self.accept(worker, make_step(2, 3, 64))
        seen = self.old_buffer_alive_at_allocation(worker, make_step(2, 4, 64))
        self.assertEqual(
            seen, [False], "the gamma-3 buffer was alive while gamma 4 was allocated"
        )
        self.assertEqual(worker._draft_probs_buf.shape, (4, 4, 64))

    def test_a_batch_that_fits_reuses_the_buffer(self):
        worker = make_worker()
        self.accept(worker, make_step(4, 3, 64))
        before = worker._draft_probs_buf
        seen = self.old_buffer_alive_at_allocation(worker, make_step(3, 3, 64))
        self.assertEqual(seen, [])
        self.assertIs(worker._draft_probs_buf, before)

    def test_after_a_growth_the_kernel_sees_exactly_this_steps_probabilities(self):
        worker = make_worker()
        self.accept(worker, make_step(2, 3, 64))
        step = make_step(3, 3, 64)
        given = self.accept(worker, step)
        expected = torch.zeros((3, 3, 64)).scatter_(
            -1, step["candidate_ids"], step["q_rows"]
        )
        self.assertTrue(torch.equal(given, expected))
        self.assertEqual(torch.count_nonzero(worker._draft_probs_buf).item(), 0)

    def test_a_failed_growth_leaves_a_worker_that_serves_the_next_batch(self):
        worker = make_worker()
        self.accept(worker, make_step(2, 3, 64))
        with mock.patch.object(
            dflash_worker_v2.torch, "zeros", side_effect=RuntimeError("no memory")
        ):
            with self.assertRaises(RuntimeError):
                worker._selector_sampling_accept(**make_step(3, 3, 64))
        step = make_step(3, 3, 64)
        given = self.accept(worker, step)
        expected = torch.zeros((3, 3, 64)).scatter_(
            -1, step["candidate_ids"], step["q_rows"]
        )
        self.assertTrue(torch.equal(given, expected))
        self.assertGreaterEqual(worker._draft_probs_buf.shape[0], 3)
        self.assertEqual(torch.count_nonzero(worker._draft_probs_buf).item(), 0)


if __name__ == "__main__":
    unittest.main()
