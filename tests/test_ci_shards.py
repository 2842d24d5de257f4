"""Shards and one verdict: ``ci run --shard I/N`` splits the selection by est_time with sglang's
own ``auto_partition`` (longest first, each to the lightest shard), and ``ci report --results
A B`` merges every shard of one run into one report, refusing a missing, duplicated, foreign or
invalid shard by name. The runs are ``ci run --git-base/--git-head`` on ``sglang_layout``.
"""

import json
import subprocess
import sys
from dataclasses import replace

import ci_samples
import pytest
import sglang_layout
from conftest import REPO, clean_env
from sglang_layout import ADDED, MODIFIED

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
    return [s.path.rpartition("/")[2] for s in selected]


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


checkout = pytest.fixture(sglang_layout.checkout, scope="module", name="checkout")


def ci(*args):
    return subprocess.run(
        [sys.executable, "-m", "ci", *map(str, args)],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def shards(checkout, tmp_path_factory):
    """Shard results of the fix branch: 0/2, 1/2 and an empty 2/3."""
    folder = tmp_path_factory.mktemp("shards")
    made = {}
    for name, shard in (("0", "0/2"), ("1", "1/2"), ("2", "2/3")):
        git = ["--root", checkout, "--git-base", "main", "--git-head", "fix", "--shard", shard]
        made[name] = (ci("run", "--out", folder / name, "--backend", "cpu", *git), folder / name)
    return made


def test_each_shard_records_its_index_and_runs_its_part_or_says_it_has_none(shards):
    for name, shard, expected in (
        ("0", "0/2", [MODIFIED]),
        ("1", "1/2", [ADDED]),
        ("2", "2/3", []),
    ):
        proc, out = shards[name]
        data = json.loads((out / "results.json").read_text())
        assert data["selection"]["shard"] == shard
        assert data["selection"]["files"] == expected, proc.stderr
    assert shards["2"][0].returncode == 0 and shards["2"][0].stdout.strip().splitlines()[-1] == (
        "ci run: shard 2/3: every selected file falls in another shard"
    )


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
    ],
    ids=["missing", "twice", "other-count", "no-shard", "other-release", "other-run", "file-twice"],
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
