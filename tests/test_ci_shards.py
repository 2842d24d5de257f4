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

from ci.evidence.model import MODES, EvidenceError
from ci.evidence.shards import merge
from ci.runner import collect

REGISTERED = """def register_cpu_ci(**kwargs):
    pass


register_cpu_ci(est_time={est}, suite="{suite}")
{more}
if __name__ == "__main__":
    print("ran")
"""


def _registered(root, name, est, suite="base-a-test-cpu", more=""):
    path = root / "test/registered" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(REGISTERED.format(est=est, suite=suite, more=more))


def _shard(root, text):
    shard = collect.parse_shard(text)
    selected, _ = collect.Tree(str(root)).select("cpu", shard=shard)
    return [s.path.rpartition("/")[2] for s in selected]


def test_shards_split_by_est_time_longest_first_to_the_lightest(tmp_path):
    for name, est in (("test_a.py", 10), ("test_b.py", 7), ("test_c.py", 5), ("test_d.py", 4)):
        _registered(tmp_path, name, est)
    _registered(tmp_path, "test_e.py", 2)
    # 10 -> 0; 7 -> 1; 5 -> 1 (7 < 10); 4 -> 0 (10 < 12); 2 -> 1 (12 < 14).
    assert _shard(tmp_path, "0/2") == ["test_a.py", "test_d.py"]
    assert _shard(tmp_path, "1/2") == ["test_b.py", "test_c.py", "test_e.py"]


def test_a_file_registered_for_two_suites_runs_in_one_shard_only(tmp_path):
    twice = 'register_cpu_ci(est_time=10, suite="base-b-test-cpu")\n'
    _registered(tmp_path, "test_twice.py", 10, more=twice)
    _registered(tmp_path, "test_once.py", 1)
    shards = [_shard(tmp_path, f"{i}/2") for i in range(2)]
    assert sorted(sum(shards, [])) == ["test_once.py", "test_twice.py"]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    return sglang_layout.make_repo(tmp_path_factory.mktemp("layout") / "sglang")


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
    """Shard results of the fix branch (0/2, 1/2, an empty 2/3) and of the branch without it."""
    folder = tmp_path_factory.mktemp("shards")
    made = {}
    for name, head, shard in (
        ("0", "fix", "0/2"),
        ("1", "fix", "1/2"),
        ("1-no-fix", "tests-only", "1/2"),
    ):
        out = folder / name
        git = ["--root", checkout, "--git-base", "main", "--git-head", head, "--shard", shard]
        made[name] = (ci("run", "--out", out, "--backend", "cpu", *git), out)
    return made


def test_each_shard_records_its_index_and_runs_its_part(shards):
    for name, expected in (("0", [MODIFIED]), ("1", [ADDED])):
        proc, out = shards[name]
        data = json.loads((out / "results.json").read_text())
        assert data["selection"]["shard"] == f"{name}/2"
        assert data["selection"]["files"] == expected, proc.stderr


def test_a_shard_that_gets_no_file_is_ok_and_says_so(checkout, tmp_path):
    git = ["--root", checkout, "--git-base", "main", "--git-head", "fix"]
    proc = ci("run", "--out", tmp_path, "--backend", "cpu", *git, "--shard", "2/3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == (
        "ci run: shard 2/3: every selected file falls in another shard"
    )
    assert json.loads((tmp_path / "results.json").read_text())["files"] == []


def _head(checkout, branch="fix"):
    return subprocess.run(
        ["git", "rev-parse", branch], cwd=checkout, capture_output=True, text=True
    ).stdout.strip()


def test_two_shards_render_into_one_report_with_both_shards_cases(shards, checkout):
    head = _head(checkout)
    proc = ci("report", "--results", shards["1"][1], shards["0"][1], "--sha", head, "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["comment"].count("<!-- sglang-overlay-ci:") == 1
    rows = [line for line in plan["comment"].splitlines() if line.startswith("| Test")]
    assert [row.split(" | ")[:2] for row in rows] == [
        [
            "| TestReserveSource.test\\_replacement\\_releases\\_the\\_old\\_scratch\\_before\\_allocating",
            "fixed by this PR",
        ],
        ["| TestLayout.test\\_modified", "unchanged"],
    ]
    assert ":white_check_mark:" in plan["slot_line"]
    assert [s["context"] for s in plan["statuses"]] == ["dsv4-workspace/base-a-test-cpu"]


@pytest.mark.parametrize(
    "which, said",
    [
        (("0",), "shard 1/2 missing (given: 1 of 2)"),
        (("0", "0"), "shard 0/2 given twice"),
        (("0", "1-no-fix"), "1-no-fix': git ("),
    ],
)
def test_a_missing_duplicated_or_foreign_shard_is_named_and_fails_the_report(shards, which, said):
    proc = ci("report", "--results", *(shards[name][1] for name in which))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: invalid artifact: ") and said in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    assert ":x:" in proc.stdout and "invalid artifact" in proc.stdout


def test_an_invalid_shard_is_named(shards, tmp_path):
    (tmp_path / "results.json").write_text('{"schema": 2}')
    proc = ci("report", "--results", shards["0"][1], tmp_path)
    assert proc.returncode == 2
    assert f"{tmp_path / 'results.json'}: missing field" in proc.stderr


def _sample_shard(shard, version="0.5.23", path=ci_samples.FILE):
    runs = [ci_samples.file_run(m, [(ci_samples.GROW, "pass")], path=path) for m in MODES]
    results = ci_samples.model(runs, selection={"shard": shard})
    return replace(results, sides=ci_samples.sides(version))


@pytest.mark.parametrize(
    "shards, said",
    [
        (
            [("a", "0/2", "0.5.23"), ("b", "1/2", "0.5.24")],
            "b: unmodified ran sglang '0.5.24', a '0.5.23'",
        ),
        ([("a", "0/2", "0.5.23"), ("b", "1/3", "0.5.23")], "b: shard 1/3, while the first is of 2"),
        (
            [("a", "0/2", "0.5.23"), ("b", None, "0.5.23")],
            "b: not a shard (selection.shard is None",
        ),
        ([("a", "0/2", "0.5.23"), ("b", "1/2", "0.5.23")], f"{ci_samples.FILE} ran in a and in b"),
    ],
)
def test_shards_of_other_releases_counts_or_files_are_refused(shards, said):
    named = [(name, _sample_shard(shard, version)) for name, shard, version in shards]
    with pytest.raises(EvidenceError) as refused:
        merge(named)
    assert str(refused.value).startswith(said), str(refused.value)


def test_merged_shards_keep_every_file_once_and_name_the_shards():
    named = [("b", _sample_shard("1/2", path="test/b/test_b.py")), ("a", _sample_shard("0/2"))]
    merged = merge(named)
    assert [f.path for f in merged.files] == sorted([ci_samples.FILE, "test/b/test_b.py"])
    assert merged.selection["shards"] == ["0/2", "1/2"] and merged.selection["shard"] is None
    assert len(merged.cases) == 2


@pytest.mark.parametrize("hostile", [0, 1])
def test_a_shard_whose_process_records_are_not_an_object_merges_without_them(hostile):
    # A shard's results.json is PR code's output: a record of another shape shows nothing,
    # and never crashes the report (it did: 'list' object has no attribute 'get').
    named = [("a", _sample_shard("0/2")), ("b", _sample_shard("1/2", path="test/b/test_b.py"))]
    kept = named[1 - hostile][1].environment["modes"]["change"]
    name, results = named[hostile]
    named[hostile] = (name, replace(results, environment={**results.environment, "modes": [1]}))
    assert merge(named).environment["modes"]["change"] == kept
