"""The benchmark's threshold searches and step strings, on synthetic predicates: no processes."""

import pytest

from tools.benchmark import capped, search
from tools.benchmark.launch import BenchmarkError


@pytest.mark.parametrize("threshold", [49, 51, 96, 97, 160, 161, 224, 500])
@pytest.mark.parametrize("guess", [10, 96, 161, 300])
def test_smallest_passing_finds_the_threshold_whatever_the_guess_within_its_range(threshold, guess):
    calls = []
    found = search.smallest_passing(lambda x: calls.append(x) or x >= threshold, guess, 48, 224)
    assert found.value == (threshold if threshold <= 224 else None)
    assert all(48 < c <= 224 for c in calls)  # never the floor, never beyond the ceiling
    assert found.at_bound == (threshold == 49)


@pytest.mark.parametrize("threshold", [10, 32, 33, 95, 128, 131])
@pytest.mark.parametrize("guess", [0, 95, 128, 500])
def test_largest_passing_finds_the_threshold_whatever_the_guess_within_its_range(threshold, guess):
    calls = []
    found = search.largest_passing(lambda x: calls.append(x) or x <= threshold, guess, 32, 132)
    assert found.value == (threshold if threshold >= 32 else None)
    assert all(32 <= c < 132 for c in calls)


def test_steps_round_trip_and_bad_ones_are_refused_with_the_item_named():
    steps = [(65536, "bfloat16"), (98304, "float8_e4m3fn")]
    assert capped.parse_steps(capped.format_steps(steps)) == steps
    assert [capped.step_mib(s) for s in steps] == [64.0, 48.0]
    for bad in ("", "0:bfloat16", "12:int8", "x:bfloat16", "12"):
        with pytest.raises(BenchmarkError, match="bad step"):
            capped.parse_steps(bad)
