"""Every registered test kills a named mutant of its fix, and the fix passes them all.

``registered_mutants.py`` applies each fix to the installed 0.5.23 file, changes it into each
named mutant, and runs the fix's registered file for one backend against every variant, in a
fresh interpreter with the overlay off. The table there pins which tests kill which variant.
The CUDA files run where torch sees a GPU (on the H200: ``SGLANG_OVERLAY_DISABLE=1 python -m
pytest -q -p no:xdist tests/test_registered_mutants.py``).
"""

import json
import subprocess
import sys

import pytest
import registered_mutants
from conftest import REPO, clean_env


def outcomes(backend: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests/registered_mutants.py"), backend],
        env=clean_env(SGLANG_OVERLAY_DISABLE="1"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def has_gpu() -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], env=clean_env()).returncode == 0


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_each_registered_test_kills_the_mutants_its_table_names_and_passes_the_fix(backend):
    if backend == "cuda" and not has_gpu():
        pytest.skip("the CUDA files need a GPU")
    report = outcomes(backend)
    assert sorted(report) == sorted(registered_mutants.FIXES)
    assert registered_mutants.problems(backend, report) == []


def test_a_word_that_names_no_test_or_two_is_refused():
    tests = ["test_growing_releases", "test_growing_keeps"]
    with pytest.raises(registered_mutants.Refused, match="'growing' names 2 tests"):
        registered_mutants.killers("growing", tests, "0001 unmodified")
    with pytest.raises(registered_mutants.Refused, match="'shrink' names 0 tests"):
        registered_mutants.killers("shrink", tests, "0001 unmodified")


def test_a_mutant_whose_edit_does_not_match_once_is_refused():
    with pytest.raises(registered_mutants.Refused, match="matches 0 times, not once"):
        registered_mutants.substitute("a\n", "b\n", "c\n", "0001 mutant")
