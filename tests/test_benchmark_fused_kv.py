"""``tools.benchmark.fused_kv`` on sglang 0.5.23's real ``FusedKVMaterializeHelper._ensure_workspace``:
growing its three workspaces from C to 2C peaks one K workspace above the new total while the
old ones are held (sglang's method), and at the new total with the overlay's method (patch
0003) and when they are released first by hand (the measurement the triage in
docs/grow-while-held-audit-0.5.23.md rests on)."""

import pytest

from tools.benchmark import fused_kv

pytestmark = pytest.mark.usefixtures("fused_kv_importable")


def test_running_peak_is_the_highest_running_sum_in_time_order():
    assert fused_kv.running_peak([(2, -4), (1, 4), (3, 8), (4, -2)]) == (8, 6)


@pytest.mark.parametrize("order, peak", [("unmodified", 9), ("overlay", 8), ("released-first", 8)])
def test_growing_c_to_2c_peaks_one_k_workspace_above_the_new_total_only_unmodified(order, peak):
    row = fused_kv.grow(64, order)
    assert row["capacity"] == [64, 128]
    assert (row["old_total_units"], row["new_total_units"], row["peak_units"]) == (4, 8, peak)


def test_each_order_leaves_the_overlay_as_it_found_it():
    import sglang_overlay

    before = sglang_overlay.status()
    for order in fused_kv.ORDERS:
        fused_kv.grow(8, order)
        assert sglang_overlay.status() == before, order
