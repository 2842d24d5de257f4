"""DFlash selector sampling on CPU: the dense draft-probability buffer is released
before its replacement is allocated.

``DFlashWorkerV2._selector_sampling_accept`` scatters the selector's sparse draft
probabilities into a dense float32 buffer of (capacity, gamma, vocab) and replaces it
when a larger batch (the capacity at least doubles), gamma or the vocabulary needs it.
Allocated while the worker or the method's local still references the old buffer, old
and new are alive at once. A torch function mode sees the allocation: the old buffer
must already be dead by then. The worker is built without its constructor (which needs
a target model) and DSpark's accept kernel is stood in for; the CUDA test of the method
measures the memory this saves.
"""

import unittest
import weakref
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

from sglang.srt.speculative import dflash_worker_v2
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

TOP_K = 2


def make_worker():
    worker = DFlashWorkerV2.__new__(DFlashWorkerV2)
    worker._draft_probs_buf = None
    worker._block_verification = False
    return worker


def make_step(bs, gamma, vocab=64):
    """One verify step: bs rows of gamma + 1 candidates, TOP_K draft ids per position."""
    generator = torch.Generator().manual_seed(bs * 100 + gamma)
    ids = [
        torch.randperm(vocab, generator=generator)[:TOP_K] for _ in range(bs * gamma)
    ]
    return {
        "candidates": torch.zeros((bs, gamma + 1), dtype=torch.int64),
        "next_token_logits": torch.zeros((bs * (gamma + 1), vocab)),
        "candidate_ids": torch.stack(ids).view(bs, gamma, TOP_K),
        "q_rows": torch.rand((bs, gamma, TOP_K), generator=generator),
        "sampling_info": None,
        "draft_input": None,
    }


class OnZeros(TorchFunctionMode):
    """Records at each ``torch.zeros`` whether ``old`` is alive; raises if ``fail``."""

    def __init__(self, old, fail=False):
        super().__init__()
        self.old, self.fail, self.alive = weakref.ref(old), fail, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.zeros:
            self.alive.append(self.old() is not None)
            if self.fail:
                raise RuntimeError("out of memory")
        return func(*args, **(kwargs or {}))


def accept(worker, step):
    """Runs the real method with DSpark's kernel stood in; returns the dense
    probabilities the kernel was given."""
    given = []

    def accept_sampling(*, draft_probs, **kwargs):
        given.append(draft_probs.clone())
        zeros = draft_probs.new_zeros(draft_probs.shape[0])
        return zeros, zeros, None

    with mock.patch.object(dflash_worker_v2, "accept_sampling", accept_sampling):
        worker._selector_sampling_accept(**step)
    return given[0]


def scattered(step):
    """The dense probabilities the kernel must see for ``step``."""
    bs, gamma, _ = step["q_rows"].shape
    dense = torch.zeros((bs, gamma, step["next_token_logits"].shape[-1]))
    return dense.scatter_(-1, step["candidate_ids"], step["q_rows"])


class TestDFlashDraftProbsReleaseOrder(CustomTestCase):
    # Each test builds its own worker: CustomTestCase's retry in CI skips setUp.

    def test_growing_the_batch_releases_the_old_buffer_before_allocating(self):
        worker = make_worker()
        accept(worker, make_step(2, 3))
        step = make_step(3, 3)
        with OnZeros(worker._draft_probs_buf) as mode:
            given = accept(worker, step)
        self.assertEqual(mode.alive, [False], "the old buffer was alive")
        self.assertEqual(worker._draft_probs_buf.shape, (4, 3, 64))
        self.assertTrue(torch.equal(given, scattered(step)))

    def test_changing_gamma_releases_the_old_buffer_before_allocating(self):
        worker = make_worker()
        accept(worker, make_step(2, 3))
        step = make_step(2, 4)
        with OnZeros(worker._draft_probs_buf) as mode:
            accept(worker, step)
        self.assertEqual(mode.alive, [False], "the gamma-3 buffer was alive")

    def test_a_batch_that_fits_reuses_the_buffer(self):
        worker = make_worker()
        accept(worker, make_step(4, 3))
        before = worker._draft_probs_buf
        step = make_step(3, 3)
        self.assertTrue(torch.equal(accept(worker, step), scattered(step)))
        self.assertIs(worker._draft_probs_buf, before)

    def test_a_failed_growth_leaves_a_worker_that_serves_the_next_batch(self):
        worker = make_worker()
        accept(worker, make_step(2, 3))
        step = make_step(3, 3)
        with self.assertRaises(RuntimeError), OnZeros(worker._draft_probs_buf, True):
            accept(worker, step)
        self.assertTrue(torch.equal(accept(worker, step), scattered(step)))
        self.assertEqual(torch.count_nonzero(worker._draft_probs_buf).item(), 0)


if __name__ == "__main__":
    unittest.main()
