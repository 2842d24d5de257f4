"""The benchmark's capped child: a sequence of requests in a fresh process under a cap, with
the overlay off or on, its result handed back on its own descriptor."""

import overlay_runs

from tools.benchmark import capped

STEPS = capped.TRANSITIONS["grow_bf16_64_to_96_mib"]
# Each mode's child is a fresh process: both start early, side by side, from the shared pool.
for _mode in ("unmodified", "change"):
    overlay_runs.job(f"capped_{_mode}_run")(
        lambda directory, mode=_mode: capped.launch_steps(STEPS, "cpu", 128, mode, timeout_s=300)
    )
capped_unmodified_run = overlay_runs.fixture("capped_unmodified_run")
capped_change_run = overlay_runs.fixture("capped_change_run")


def test_grow_64_to_96_mib_under_a_128_mib_cap_fails_unmodified_and_fits_with_the_change(
    capped_unmodified_run, capped_change_run
):
    unmodified, change = capped_unmodified_run, capped_change_run
    assert (unmodified["outcome"], change["outcome"]) == ("oom", "pass"), (unmodified, change)
    assert "can't allocate memory" in unmodified["detail"]
    assert unmodified["class"] == "SparsePrefillKVBuffer" and change["wall_s"] > 0
