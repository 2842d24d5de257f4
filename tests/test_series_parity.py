"""Parity: the upstream patch and the runtime overlay are the same fix, by the same proof.

The registered regression test's own harness (``launch_case`` from
test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py, through ``ci.harness``) runs every
case in a capped fresh subprocess against three sources of the workspace class:

* pristine: the materialised sglang release, overlay off;
* patched: the same release with the series applied by git am, overlay off;
* overlay: the installed sglang with the runtime overlay on.

Pristine must run out of memory on every replacement; patched must pass everything the
registered test asserts; overlay and patched must agree on every case.
"""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from ci import harness as reg

# series, pristine_tree and patched_tree: session fixtures shared by the series tests.
pytest_plugins = ["series_fixtures"]

FIX = "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"


# (case, budget): every case of the registered test, plus its 100 MiB peak variant of the grow.
CASES = [(case, reg.ALLOCATOR_CAP_MIB) for case in (*reg.TRANSITIONS, *reg.CHECKS)] + [
    ("grow_bf16_64_to_96_mib", reg.PEAK_LIMIT_MIB)
]
REPLACEMENTS = [(case, reg.ALLOCATOR_CAP_MIB) for case in reg.TRANSITIONS]


def _source_env(tree):
    """A materialised tree's python/ first on the path, the installed overlay off."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree / "python"), env.get("PYTHONPATH")]))
    env["SGLANG_OVERLAY_DISABLE"] = "1"
    return env


def _overlay_env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGLANG_OVERLAY_DISABLE")}
    return env


def _sglang_origin(env) -> str:
    """Where a child with ``env`` finds sglang (find_spec does not run sglang's __init__)."""
    code = "import importlib.util as u; print(u.find_spec('sglang').origin)"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="session")
def outcomes(pristine_tree, patched_tree):
    """Every (variant, case, budget) result, run two at a time (each child is single-threaded)."""
    envs = {
        "pristine": _source_env(pristine_tree),
        "patched": _source_env(patched_tree),
        "overlay": _overlay_env(),
    }
    jobs = [("pristine", case, budget) for case, budget in REPLACEMENTS]
    jobs += [
        (variant, case, budget) for variant in ("patched", "overlay") for case, budget in CASES
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            job: pool.submit(reg.launch_case, job[1], "cpu", job[2], envs[job[0]]) for job in jobs
        }
        return {job: future.result() for job, future in futures.items()}


def test_children_import_the_workspace_from_the_intended_source(pristine_tree, patched_tree):
    assert _sglang_origin(_source_env(pristine_tree)).startswith(str(pristine_tree))
    assert _sglang_origin(_source_env(patched_tree)).startswith(str(patched_tree))
    assert "site-packages" in _sglang_origin(_overlay_env())
    assert b"self._buffer = None" in (patched_tree / FIX).read_bytes()
    assert b"self._buffer = None" not in (pristine_tree / FIX).read_bytes()


@pytest.mark.parametrize("case, budget", REPLACEMENTS, ids=lambda v: str(v))
def test_pristine_source_runs_out_of_memory_on_every_replacement(outcomes, case, budget):
    result = outcomes[("pristine", case, budget)]
    assert result["class"] == "SparsePrefillKVBuffer"
    assert result["outcome"] == "oom", result


@pytest.mark.parametrize("case, budget", CASES, ids=lambda v: str(v))
def test_patched_source_passes_what_the_registered_test_asserts(outcomes, case, budget):
    result = outcomes[("patched", case, budget)]
    assert result["outcome"] == "pass", result
    if case == "retained_view_keeps_values":
        assert not result["views_alias"] and result["view_unchanged"]
    if case == "smaller_request_reuses_storage":
        assert result["same_storage"] and result["small_shape"][0] == reg.ROWS_64_MIB_BF16


@pytest.mark.parametrize("case, budget", CASES, ids=lambda v: str(v))
def test_overlay_and_patch_give_the_same_outcome(outcomes, case, budget):
    patched, overlay = outcomes[("patched", case, budget)], outcomes[("overlay", case, budget)]
    compared = {k: v for k, v in patched.items() if k != "detail"}
    assert {k: overlay.get(k) for k in compared} == compared
