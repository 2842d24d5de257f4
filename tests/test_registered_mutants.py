"""Every registered CPU test kills a named mutant of its fix, and the fix passes them all.

``python -m tools.registered_mutants`` applies each fix of the series to the installed 0.5.23 base
file, changes it into each named mutant (a plausible wrong version of the fix), and runs the
fix's registered CPU file against every variant. Here, on CPU, the whole table is pinned: which
test kills which mutant. The CUDA files' table is the H200's
(docs/evidence/device-scripts/h200_registered_mutants.sh).
"""

import json
import subprocess
import sys

import pytest
from conftest import REPO, clean_env

from tools.registered_mutants import fixes, harness

DFP_ORDER = (
    "test_growing_the_batch_releases_the_old_buffer_before_allocating",
    "test_changing_gamma_releases_the_old_buffer_before_allocating",
)
DSA_QPAD = "test_more_tokens_release_the_old_q_pad_before_allocating"
DSA_KV = "test_more_kv_rows_release_the_old_kv_buffer_before_allocating"
DSA_OUT = "test_more_tokens_release_the_old_outputs_before_allocating"
DSA_FITS = "test_a_call_that_fits_reuses_the_scratch"
DSV4Q_ORDER = "test_more_tokens_release_the_old_q_pad_before_allocating"
DSV4Q_FITS = "test_a_call_that_fits_reuses_the_q_pad"
BQ_ORDER = (
    "test_more_tokens_release_the_old_born_q_buffer_before_allocating",
    "test_a_new_head_dim_releases_the_old_born_q_buffer_before_allocating",
)
BQ_SENTINEL = "test_more_tokens_release_the_old_sentinel_before_allocating"

# mutant -> the CPU tests that kill it (every other test lets it survive)
KILLS = {
    "0001": {
        "unmodified": {
            "test_changing_dtype_releases_the_old_scratch_before_allocating",
            "test_growing_releases_the_old_scratch_before_allocating",
        },
        "head-never-cleared": {"test_a_failed_replacement_keeps_no_head_for_rows_it_dropped"},
        "head-cleared-after-allocating": {
            "test_a_failed_replacement_keeps_no_head_for_rows_it_dropped"
        },
        "old-scratch-kept-in-a-local": {
            "test_changing_dtype_releases_the_old_scratch_before_allocating",
            "test_growing_releases_the_old_scratch_before_allocating",
        },
        "released-on-growth-only": {
            "test_changing_dtype_releases_the_old_scratch_before_allocating"
        },
        "released-before-the-capacity-check": {"test_a_request_that_fits_keeps_the_scratch"},
        "grown-in-place": {
            "test_a_failed_replacement_keeps_no_head_for_rows_it_dropped",
            "test_a_view_held_across_a_replacement_keeps_its_values",
            "test_growing_releases_the_old_scratch_before_allocating",
        },
    },
    "0003": {
        "unmodified": {
            "test_a_failed_dtype_change_leaves_workspaces_of_the_next_batchs_dtype",
            "test_changing_dtype_releases_the_old_workspaces_before_allocating",
            "test_growing_releases_the_old_workspaces_before_allocating",
        },
        "only-the-projection-released": {
            "test_changing_dtype_releases_the_old_workspaces_before_allocating",
            "test_growing_releases_the_old_workspaces_before_allocating",
        },
        "old-workspaces-kept-in-locals": {
            "test_changing_dtype_releases_the_old_workspaces_before_allocating",
            "test_growing_releases_the_old_workspaces_before_allocating",
        },
        "capacity-and-dtype-kept": {
            "test_a_failed_dtype_change_leaves_workspaces_of_the_next_batchs_dtype"
        },
        "released-on-growth-only": {
            "test_a_failed_dtype_change_leaves_workspaces_of_the_next_batchs_dtype",
            "test_changing_dtype_releases_the_old_workspaces_before_allocating",
        },
        "released-before-the-reuse-check": {
            "test_a_request_that_fits_reuses_the_workspaces",
            "test_growing_releases_the_old_workspaces_before_allocating",
        },
    },
    "0005": {
        "unmodified": set(DFP_ORDER),
        "old-buffer-kept-in-the-local": set(DFP_ORDER),
        "old-buffer-kept-in-the-attribute": set(DFP_ORDER),
        # and the order tests, whose growth then gets a buffer sized for the batch alone
        "released-before-the-reuse-check": {"test_a_batch_that_fits_reuses_the_buffer", *DFP_ORDER},
    },
    # three buffers of one method: each buffer's release has its own order test
    "0007": {
        "unmodified": {DSA_QPAD, DSA_KV, DSA_OUT},
        "q-pad-fixed-others-not": {DSA_KV, DSA_OUT},
        "kv-rows-fixed-others-not": {DSA_QPAD, DSA_OUT},
        "outputs-fixed-others-not": {DSA_QPAD, DSA_KV},
        "q-pad-attribute-cleared-local-kept": {DSA_QPAD},
        "kv-rows-attribute-cleared-local-kept": {DSA_KV},
        "outputs-attribute-cleared-local-kept": {DSA_OUT},
        "locals-cleared-attributes-kept": {DSA_QPAD, DSA_KV, DSA_OUT},
        "q-pad-released-before-the-reuse-check": {DSA_FITS},
        # and the other torch.empty buffer's order test, which sees one allocation too many
        "kv-rows-released-before-the-reuse-check": {DSA_FITS, DSA_OUT},
        "outputs-released-before-the-reuse-check": {DSA_FITS, DSA_KV},
        "released-with-del": {"test_a_failed_grow_leaves_a_backend_that_serves_the_next_call"},
    },
    "0009": {
        "unmodified": {DSV4Q_ORDER},
        "attribute-cleared-local-kept": {DSV4Q_ORDER},
        "local-cleared-attribute-kept": {DSV4Q_ORDER},
        "released-before-the-reuse-check": {DSV4Q_FITS},
    },
    # two methods of one class: each method's release order has its own tests
    "0011": {
        "unmodified": {*BQ_ORDER, BQ_SENTINEL},
        "born-q-attribute-cleared-local-kept": set(BQ_ORDER),
        "born-q-local-cleared-attribute-kept": set(BQ_ORDER),
        "sentinel-fixed-buffer-not": set(BQ_ORDER),
        "buffer-fixed-sentinel-not": {BQ_SENTINEL},
        "sentinel-attribute-cleared-local-kept": {BQ_SENTINEL},
        "born-q-released-on-growth-only": {BQ_ORDER[1]},
        "born-q-released-before-the-reuse-check": {"test_a_call_that_fits_reuses_the_born_q_buffer"},
        "sentinel-released-before-the-reuse-check": {"test_a_call_that_fits_reuses_the_sentinel"},
    },
}


@pytest.fixture(scope="module")
def cpu_table():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.registered_mutants", "--backend", "cpu", "--json"],
        env=clean_env(SGLANG_OVERLAY_DISABLE="1"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc


def test_every_cpu_test_kills_a_named_mutant_and_the_fix_passes_them_all(cpu_table):
    assert cpu_table.returncode == 0, cpu_table.stdout[-3000:] + cpu_table.stderr[-3000:]
    document, verdict = cpu_table.stdout.rsplit("\n", 2)[0], cpu_table.stdout.splitlines()[-1]
    assert verdict == "verdict: ok (cpu)"
    report = json.loads(document)
    for number, outcomes in report.items():
        assert set(outcomes["fix"].values()) == {"pass"}
        kills = {
            variant: {t.split("::")[1] for t, r in results.items() if r in ("fail", "error")}
            for variant, results in outcomes.items()
            if variant != "fix"
        }
        assert kills == KILLS[number]
        # each test kills at least one mutant, but a preservation test, which kills none
        preserved = set(fixes.FIXES[number].preserved_by)
        assert {t.split("::")[1] for t in outcomes["fix"]} - preserved == set().union(
            *kills.values()
        )
        assert not preserved & set().union(*kills.values())


def test_the_mutants_are_the_ones_the_harness_names():
    for number, fix in fixes.FIXES.items():
        assert [m.name for m in fix.mutants] == [v for v in KILLS[number] if v != "unmodified"]
        # what the harness demands of each mutant is what kills it here
        for mutant in fix.mutants:
            assert set(mutant.killed_by.get("cpu", ())) <= KILLS[number][mutant.name]


def test_a_mutant_whose_edit_does_not_match_once_is_refused_in_one_line():
    with pytest.raises(harness.Refused, match="matches 0 times, not once"):
        harness.substitute("a\n", "b\n", "c\n", "mutant x")


def test_a_cuda_run_without_a_gpu_says_so_in_one_line_and_exits_2():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.registered_mutants", "--backend", "cuda"],
        env=clean_env(SGLANG_OVERLAY_DISABLE="1", CUDA_VISIBLE_DEVICES=""),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "registered_mutants: --backend cuda: torch sees no CUDA device"
    ]
