"""Every registered test kills a named mutant of its fix, and the fix passes them all."""

import pytest
import registered_mutants
import torch


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_each_registered_test_kills_the_mutants_its_table_names_and_passes_the_fix(backend):
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("the CUDA files need a GPU")
    report = registered_mutants.run(backend)
    assert sorted(report) == sorted(registered_mutants.FIXES)
    assert registered_mutants.problems(backend, report) == []


TESTS = ["test_growing_releases", "test_growing_keeps"]


@pytest.mark.parametrize(
    "refused, message",
    [
        (lambda: registered_mutants.killers("growing", TESTS, "0001 x"), "'growing' names 2 tests"),
        (lambda: registered_mutants.killers("shrink", TESTS, "0001 x"), "'shrink' names 0 tests"),
        (lambda: registered_mutants.substitute("a\n", "b\n", "c\n", "0001 x"), "matches 0 times"),
    ],
)
def test_a_table_row_that_does_not_name_one_test_or_match_once_is_refused(refused, message):
    with pytest.raises(registered_mutants.Refused, match=message):
        refused()
