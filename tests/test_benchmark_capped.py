"""The benchmark's capped child: a sequence of requests in a fresh process under a cap, with
the overlay off or on."""

from benchmark import capped


def test_a_capped_child_runs_any_sequence_and_reports_the_oom_unmodified_only():
    steps = capped.TRANSITIONS["grow_bf16_64_to_96_mib"]
    unmodified = capped.launch(steps, "cpu", 128, "unmodified", timeout_s=300)
    change = capped.launch(steps, "cpu", 128, "change", timeout_s=300)
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
