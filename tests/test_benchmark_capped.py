"""The benchmark's capped child: a sequence of requests in a fresh process under a cap, with
the overlay off or on."""

import overlay_runs

from tools.benchmark import capped

STEPS = capped.TRANSITIONS["grow_bf16_64_to_96_mib"]
# Each mode's child is a fresh process: both start early, side by side, from the shared pool.
for _mode in ("unmodified", "change"):
    overlay_runs.job(f"capped_{_mode}_run")(
        lambda directory, mode=_mode: capped.launch(STEPS, "cpu", 128, mode, timeout_s=300)
    )
capped_unmodified_run = overlay_runs.fixture("capped_unmodified_run")
capped_change_run = overlay_runs.fixture("capped_change_run")


def test_a_capped_child_runs_any_sequence_and_reports_the_oom_unmodified_only(
    capped_unmodified_run, capped_change_run
):
    unmodified, change = capped_unmodified_run, capped_change_run
    assert (unmodified["outcome"], change["outcome"]) == ("oom", "pass"), (unmodified, change)
    assert "can't allocate memory" in unmodified["detail"]
    assert unmodified["class"] == "SparsePrefillKVBuffer" and change["wall_s"] > 0


def test_steps_are_parsed_strictly():
    assert capped.parse_steps("16:bfloat16, 8:float8_e4m3fn") == [(16, "bfloat16"), (8, "float8_e4m3fn")]
    for bad in ("16", "0:bfloat16", "16:int8", "x:bfloat16"):
        try:
            capped.parse_steps(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
