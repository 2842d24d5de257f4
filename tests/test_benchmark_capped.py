"""The benchmark's capped child runs sequences the registered test does not list, as steps.

It takes the registered test's ``run_case`` through ``ci.harness`` and passes its own request
sequence as an argument, so the registered tables stay as they are (they are read-only).
"""

from benchmark import capped
from ci import harness


def test_a_sequence_the_registered_test_does_not_list_runs_as_steps_in_a_capped_child():
    steps = [
        (harness.ROWS_64_MIB_BF16 // 4, "bfloat16"),
        (harness.ROWS_64_MIB_BF16 // 2, "bfloat16"),
    ]
    result = capped.launch(steps, "cpu", 128, "unmodified", timeout_s=120)
    assert result["case"] == capped.STEPS_CASE and result["outcome"] == "pass", result
    assert result["mode"] == "unmodified" and result["wall_s"] > 0
    assert capped.STEPS_CASE not in harness.TRANSITIONS
