"""``ci run --shard I/N`` splits as sglang does; ``ci report`` merges one run's shards."""

from dataclasses import replace

import ci_samples
import pytest

from ci.evidence.model import EvidenceError
from ci.evidence.shards import merge
from ci.runner import collect


def _registered(root, name, est, suite="base-a-test-cpu", more=""):
    path = root / "test/registered" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ci_samples.registered(est=est, suite=suite, more=more))


def _shard(root, text):
    shard = collect.parse_shard(text)
    selected, _ = collect.Tree(str(root)).select("cpu", shard=shard)
    return [path.rpartition("/")[2] for path in selected]


def test_shards_split_by_est_time_longest_first_to_the_lightest(tmp_path):
    for name, est in zip("abcde", (10, 7, 5, 4, 2), strict=True):
        _registered(tmp_path, f"test_{name}.py", est)
    # 10 -> 0; 7 -> 1; 5 -> 1 (7 < 10); 4 -> 0 (10 < 12); 2 -> 1 (12 < 14).
    assert _shard(tmp_path, "0/2") == ["test_a.py", "test_d.py"]
    assert _shard(tmp_path, "1/2") == ["test_b.py", "test_c.py", "test_e.py"]


def test_a_file_registered_for_two_suites_runs_in_one_shard_only(tmp_path):
    twice = 'register_cpu_ci(est_time=10, suite="base-b-test-cpu")\n'
    _registered(tmp_path, "test_twice.py", 10, more=twice)
    _registered(tmp_path, "test_once.py", 1)
    shards = [_shard(tmp_path, f"{i}/2") for i in range(2)]
    assert sorted(sum(shards, [])) == ["test_once.py", "test_twice.py"]


OTHER = "test/b/test_b.py"


@pytest.mark.parametrize(
    "more, said",
    [
        ([], "shard 1/2 missing (given: 1 of 2)"),
        ([("b", "0/2", "0.5.23", OTHER)], "shard 0/2 given twice: a and b"),
        ([("b", "1/3")], "b: shard 1/3, while the first is of 2"),
        ([("b", None)], "b: not a shard (selection.shard is None"),
        ([("b", "1/2", "0.5.24", OTHER)], "b: unmodified ran sglang '0.5.24', a '0.5.23'"),
        ([("b", "1/2", "0.5.23", OTHER, "tests-only")], "b: git ('main', 'tests-only') differs"),
        ([("b", "1/2")], f"{ci_samples.FILE} ran in a and in b"),
        ([("b", "1/2", "0.5.23", OTHER, "fix", ["change"])], "b: sides {'change': "),
    ],
    ids=[
        "missing",
        "twice",
        "other-count",
        "no-shard",
        "other-release",
        "other-run",
        "file-twice",
        "other-sides",
    ],
)
def test_shards_that_are_not_every_part_of_one_run_are_refused_by_name(more, said):
    named = [("a", ci_samples.shard("0/2"))] + [(name, ci_samples.shard(*a)) for name, *a in more]
    with pytest.raises(EvidenceError) as refused:
        merge(named)
    assert str(refused.value).startswith(said), str(refused.value)


def test_merged_shards_keep_every_file_once_name_the_shards_and_any_shape_of_records():
    b = ci_samples.shard("1/2", path=OTHER)
    a = ci_samples.shard("0/2")
    # a shard's records are PR code's output: one of another shape shows nothing, never a crash
    a = replace(a, environment={**a.environment, "modes": [1]})
    merged = merge([("b", b), ("a", a)])
    assert [f.path for f in merged.files] == sorted([ci_samples.FILE, OTHER])
    assert merged.selection["shards"] == ["0/2", "1/2"] and merged.selection["shard"] is None
    assert len(merged.cases) == 2
    assert merged.environment["modes"]["change"] == b.environment["modes"]["change"]
