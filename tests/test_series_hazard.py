"""The evidence behind the series' warning about upstream main: ``tools.benchmark.hazard``.

Release-first can hand a replacement the old allocation address; a validity key built from
the address then matches stale rows, one built from a per-workspace generation does not.
"""

import json

import overlay_runs
import torch

from tools.benchmark import hazard
from tools.series.seriesdir import REPO_ROOT

EVIDENCE = REPO_ROOT / "docs/evidence"


class _Workspace:
    generation = 0


def test_an_address_key_matches_replaced_rows_at_the_old_address_a_generation_key_does_not():
    workspace, old = _Workspace(), torch.zeros(8)
    by_address, by_generation = hazard.AddressKeyedGather(), hazard.GenerationKeyedGather()
    by_address.filled(7, old)
    by_generation.filled(7, workspace)
    workspace.generation += 1  # replaced ...
    same_address = old[:]  # ... and the new rows start where the old ones did
    assert by_address.still_valid(7, workspace, same_address)
    assert not by_generation.still_valid(7, workspace, same_address)


# Each order is a fresh process: both start early, side by side, from the shared pool.
TRANSITION = hazard.BY_NAME["grow bf16 43 -> 256 rows"]
overlay_runs.job("hazard_holding_first_run")(
    lambda directory: hazard.launch(TRANSITION, "holding-first", "cpu", timeout_s=300)
)
overlay_runs.job("hazard_release_first_run")(
    lambda directory: hazard.launch(TRANSITION, "release-first", "cpu", timeout_s=300)
)
hazard_holding_first_run = overlay_runs.fixture("hazard_holding_first_run")
hazard_release_first_run = overlay_runs.fixture("hazard_release_first_run")


def test_each_order_runs_on_the_real_class_in_a_fresh_process(
    hazard_holding_first_run, hazard_release_first_run
):
    holding, release = hazard_holding_first_run, hazard_release_first_run
    assert holding["overlay"] == "disabled" and release["overlay"] == "applied"
    assert holding["replaced"] and release["replaced"]
    # Holding the old buffer while allocating can never return its address.
    assert not holding["same_address"] and not holding["address_key_stale"]
    assert release["address_key_stale"] == release["same_address"]
    assert not holding["generation_key_stale"] and not release["generation_key_stale"]


def test_the_committed_figures_are_what_the_rows_say():
    for name in ("h200-0.5.23-hazard", "cpu-0.5.23-hazard"):
        report = json.loads((EVIDENCE / name / "hazard.json").read_text())
        assert hazard.summarize(report["rows"]) == report["summary"]
        assert report["summary"]["holding-first"]["same_address"] == 0
        assert report["summary"]["release-first"]["generation_key_stale"] == 0
        table = hazard.render(report)
        assert table in (EVIDENCE / name / "hazard.md").read_text()


def test_benchmarks_md_shows_the_h200_hazard_as_measured():
    # BENCHMARKS.md is a document now (no generator): it holds the measured table verbatim.
    report = json.loads((EVIDENCE / "h200-0.5.23-hazard/hazard.json").read_text())
    document = (REPO_ROOT / "BENCHMARKS.md").read_text()
    s = report["summary"]["release-first"]
    assert f"| release-first | {s['same_address']} of {s['replacements']} |" in document
    assert "#### A validity key built from the address" in document
    assert hazard.render(report) in document
