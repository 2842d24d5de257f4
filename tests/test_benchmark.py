"""The benchmarks' peaks on sglang 0.5.23's real classes, in this process."""

import importlib

import pytest

import sglang_overlay
from tools.benchmark import fused_kv, workspace


def state(patch: str) -> str:
    return next(r["state"] for r in sglang_overlay.status() if r["patch"] == patch)


@pytest.mark.parametrize(
    "name, unmodified, change",
    [
        ("grow_bf16_64_to_96_mib", 160, 96),
        ("replace_fp8_48_with_bf16_96_mib", 144, 96),
        ("shrink_by_dtype_bf16_96_to_fp8_48_mib", 144, 96),
    ],
)
def test_a_workspace_replacement_peaks_at_old_plus_new_unmodified_only(name, unmodified, change):
    importlib.import_module(sglang_overlay.WORKSPACE_MODULE)
    before = state(sglang_overlay.PATCH_ID)
    steps = workspace.TRANSITIONS[name]
    assert [workspace.peak_mib(steps, "cpu", on) for on in (False, True)] == [unmodified, change]
    assert state(sglang_overlay.PATCH_ID) == before


@pytest.mark.usefixtures("fused_kv_importable")
@pytest.mark.parametrize("order, peak", [("unmodified", 9), ("overlay", 8), ("released-first", 8)])
def test_growing_the_fused_kv_workspaces_c_to_2c_peaks_above_the_new_total_unmodified_only(
    order, peak
):
    before = state(sglang_overlay.FUSED_KV_PATCH_ID)
    row = fused_kv.grow(64, order)
    assert row["capacity"] == [64, 128]
    assert (row["old_total_units"], row["new_total_units"], row["peak_units"]) == (4, 8, peak)
    assert state(sglang_overlay.FUSED_KV_PATCH_ID) == before
