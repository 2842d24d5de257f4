"""The benchmark's threshold searches and step strings, on synthetic predicates: no processes."""

import pytest

from tools.benchmark import capped, search


def counting(threshold, passes_from_threshold=True):
    calls = []

    def probe(x):
        calls.append(x)
        return x >= threshold if passes_from_threshold else x <= threshold

    return probe, calls


@pytest.mark.parametrize("threshold", [51, 96, 97, 100, 130, 160, 161, 200])
@pytest.mark.parametrize("guess", [60, 96, 160, 161, 224])
def test_smallest_passing_finds_the_threshold_whatever_the_guess(threshold, guess):
    probe, _ = counting(threshold)
    found = search.smallest_passing(probe, guess, floor=48, ceiling=224)
    assert found.value == threshold


def test_smallest_passing_needs_two_probes_when_the_guess_is_exact():
    probe, calls = counting(161)
    found = search.smallest_passing(probe, 161, floor=48, ceiling=224)
    assert found.value == 161 and calls == [161, 160]
    assert found.probes == [(161, True), (160, False)]


def test_smallest_passing_reports_none_when_nothing_in_range_passes():
    probe, _ = counting(500)
    assert search.smallest_passing(probe, 100, floor=48, ceiling=224).value is None


def test_smallest_passing_flags_an_answer_at_the_open_end_of_the_range():
    probe, _ = counting(0)
    found = search.smallest_passing(probe, 96, floor=48, ceiling=224)
    assert found.value == 49 and found.at_bound


def test_smallest_passing_never_probes_the_floor_or_beyond_the_ceiling():
    probe, calls = counting(120)
    search.smallest_passing(probe, 10, floor=48, ceiling=224)
    assert all(48 < c <= 224 for c in calls)


@pytest.mark.parametrize("threshold", [32, 33, 95, 126, 127, 128, 131])
@pytest.mark.parametrize("guess", [0, 95, 126, 128, 500])
def test_largest_passing_finds_the_threshold_whatever_the_guess(threshold, guess):
    probe, calls = counting(threshold, passes_from_threshold=False)
    found = search.largest_passing(probe, guess, floor=32, ceiling=132)
    assert found.value == threshold
    assert all(32 <= c < 132 for c in calls)


def test_largest_passing_reports_none_when_even_the_floor_fails():
    probe, _ = counting(10, passes_from_threshold=False)
    assert search.largest_passing(probe, 100, floor=32, ceiling=132).value is None


def test_steps_round_trip_through_the_child_command_line():
    steps = [(65536, "bfloat16"), (98304, "float8_e4m3fn")]
    assert capped.parse_steps(capped.format_steps(steps)) == steps
    assert [capped.step_mib(s) for s in steps] == [64.0, 48.0]


@pytest.mark.parametrize("bad", ["", "0:bfloat16", "12:int8", "x:bfloat16", "12"])
def test_bad_steps_are_refused_with_the_item_named(bad):
    with pytest.raises(ValueError, match="bad step"):
        capped.parse_steps(bad)
