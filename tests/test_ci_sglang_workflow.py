"""The drop-in workflows for sglang's repository (ci/workflows/sglang-pr-ab.yml, and for fork PRs
sglang-pr-ab-report.yml): who may do what, read from the YAML, and a rehearsal of a pull request
end to end (``sglang_rehearsal``: the workflows' own ``run:`` steps with the environment they
give them, a local sglang-layout repository, the fake GitHub receiving the posts). A fork's
pull_request run has a read-only token; its report comes from the workflow_run report, which
reads every shard's artifact from GitHub itself; the attacks on that path (shards of another
commit, a shard missing or given twice, over the cap) replay it on the rehearsal's own shards.
"""

import json
import re
import shutil

import pytest
import sglang_layout
import yaml
from ci_fake_github import FakeGitHub
from sglang_rehearsal import (
    ACTIONS_BOT,
    FLOW,
    PR,
    REPORT_FLOW,
    RUN_ID,
    TOKEN,
    fork_pr,
    git,
    load,
    rehearse,
    report_fork_run,
    serve_artifact,
    zipped,
)

from ci.reporter import pr_states


def test_only_the_test_jobs_meet_pr_code_and_they_hold_no_token():
    jobs = load()["jobs"]
    test = jobs["test"]
    assert test["permissions"] == {"contents": "read"}
    dumped = yaml.safe_dump(test)
    assert "github.token" not in dumped and "secrets." not in dumped
    for job_id in ("gate", "report"):
        for step in jobs[job_id]["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                # The bot at its pinned commit; never the PR's head or merge commit.
                assert step["with"]["ref"] == "${{ vars.SGLANG_OVERLAY_REF }}", job_id
                assert step["with"]["persist-credentials"] is False
    for step in test["steps"]:
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False


def test_the_matrix_has_one_job_per_shard_and_every_action_is_pinned():
    flow = load()
    shards = int(flow["env"]["SHARDS"])
    assert flow["jobs"]["test"]["strategy"]["matrix"]["shard"] == list(range(shards))
    for ref in re.findall(r"^\s*(?:- )?uses:\s*(\S+)", FLOW.read_text(), flags=re.M):
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
    assert flow["jobs"]["report"]["needs"] == ["gate", "test"]
    assert flow["jobs"]["report"]["if"].startswith("always()")


# --- the rehearsal -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return sglang_layout.make_repo(tmp_path_factory.mktemp("layout") / "sglang")


@pytest.fixture(scope="module")
def rehearsed(layout, tmp_path_factory):
    return rehearse(tmp_path_factory.mktemp("fix"), layout, "fix")


def test_the_gate_lets_a_same_repo_head_run(rehearsed):
    gate = rehearsed["gate"]
    assert (gate["run"], gate["fork"], gate["sha"]) == ("true", "false", rehearsed["head"])


def test_every_shard_ran_and_the_pr_got_one_report_with_both_shards_cases(rehearsed):
    fake, play = rehearsed["fake"], rehearsed["play"]
    assert rehearsed["shards"] == ["success", "success"], play.log
    assert rehearsed["report"] == "success", play.log
    assert sorted(p.name for p in play.artifacts.iterdir()) == ["ab-results-0", "ab-results-1"]
    slot = pr_states.get_slot(fake.bodies[PR], "ab")
    assert slot.startswith(":white_check_mark:"), slot
    (comment,) = fake.comments.values()
    assert "TestReserveSource.test\\_replacement" in comment["body"]
    assert "TestLayout.test\\_modified" in comment["body"]
    assert [(s["context"], s["state"]) for s in fake.statuses] == [
        ("ab/base-a-test-cpu", "success")
    ]
    (check,) = fake.check_runs.values()
    assert check["conclusion"] == "success"


def test_a_head_that_fails_its_own_test_fails_its_shard_and_the_report_says_so(
    layout, tmp_path_factory
):
    played = rehearse(tmp_path_factory.mktemp("no-fix"), layout, "tests-only")
    fake, play = played["fake"], played["play"]
    # The added test (est 1 s) is shard 1's; the modified one (2 s) shard 0's.
    assert played["shards"] == ["success", "failure"], play.log
    assert played["report"] == "success", play.log
    assert pr_states.get_slot(fake.bodies[PR], "ab").startswith(":x:")
    assert [(s["context"], s["state"]) for s in fake.statuses] == [
        ("ab/base-a-test-cpu", "failure")
    ]
    (check,) = fake.check_runs.values()
    assert check["conclusion"] == "failure"


def test_the_fork_report_runs_on_the_drop_ins_completed_runs_with_the_pinned_bot_only():
    flow, pr_flow = load(REPORT_FLOW), load()  # YAML 1.1 reads the key `on` as True
    assert flow[True] == {"workflow_run": {"workflows": [pr_flow["name"]], "types": ["completed"]}}
    # The same slot and shard count as the run it reports: one slot, every shard read.
    for key in ("SLOT", "SLOT_LABEL", "SHARDS"):
        assert flow["env"][key] == pr_flow["env"][key], key
    assert flow["permissions"] == {}
    (job,) = flow["jobs"].values()
    assert job["if"] == (
        "github.event.workflow_run.event == 'pull_request' "
        "&& github.event.workflow_run.head_repository.full_name != github.repository"
    )
    assert job["permissions"] == {
        "actions": "read",
        "checks": "write",
        "contents": "read",
        "issues": "write",
        "pull-requests": "write",
        "statuses": "write",
    }
    uses = [step["uses"] for step in job["steps"] if "uses" in step]
    # No download action: the bot fetches each artifact itself, its size checked first.
    assert [u.split("@")[0] for u in uses] == ["actions/checkout", "actions/setup-python"]
    for ref in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
    (checkout,) = [step for step in job["steps"] if "actions/checkout@" in step.get("uses", "")]
    assert checkout["with"] == {
        "repository": "${{ vars.SGLANG_OVERLAY_REPOSITORY }}",
        "ref": "${{ vars.SGLANG_OVERLAY_REF }}",
        "persist-credentials": False,
    }
    # The PR, its head and the run come to the bot in the event payload, which it checks; no
    # step is handed a value of the event.
    for step in job["steps"]:
        assert "github.event" not in yaml.safe_dump(step), step


FORK = "someone/sglang"


@pytest.fixture(scope="module")
def fork_rehearsed(layout, tmp_path_factory):
    return rehearse(tmp_path_factory.mktemp("fork"), layout, "fix", fork=FORK)


def test_an_approved_forks_pull_request_run_tests_every_shard_and_writes_nothing(fork_rehearsed):
    played, play = fork_rehearsed, fork_rehearsed["play"]
    assert played["gate"]["fork"] == "true" and played["gate"]["run"] == "true", play.log
    assert played["shards"] == ["success", "success"] and played["report"] == "success", play.log
    # Its token is read-only: the report is in the job summary, and nothing was even tried.
    assert "TestReserveSource.test\\_replacement" in played["summary"]
    assert played["pr_run_writes"] == []


def test_the_fork_report_posts_one_report_of_every_shard_from_the_completed_run(fork_rehearsed):
    fake, play = fork_rehearsed["fake"], fork_rehearsed["report_play"]
    assert fork_rehearsed["fork_report"] == "success", play.log
    slot = pr_states.get_slot(fake.bodies[PR], "ab")
    assert slot.startswith(":white_check_mark: [Run #456]"), slot
    (comment,) = fake.comments.values()
    assert comment["login"] == "github-actions[bot]"
    assert "TestReserveSource.test\\_replacement" in comment["body"]  # shard 1's
    assert "TestLayout.test\\_modified" in comment["body"]  # shard 0's
    assert [(s["context"], s["state"], s["sha"]) for s in fake.statuses] == [
        ("ab/base-a-test-cpu", "success", fork_rehearsed["head"])
    ]
    (check,) = fake.check_runs.values()
    assert check["conclusion"] == "success" and check["head_sha"] == fork_rehearsed["head"]
    assert "TestLayout.test\\_modified" in fork_rehearsed["fork_summary"]
    # Each shard's artifact was listed by name and downloaded by the bot; the storage host never
    # saw the token.
    assert fake.count("GET", r"/actions/runs/456/artifacts") == 2
    assert fake.count("GET", r"/zip$") == 2 and fake.blob_auth == [None, None]


# --- the fork report under attack: the shards' artifacts are PR code's output ------------------
# Each test plays the report workflow's job on a completed fork run whose artifacts are the real
# shards of the fork rehearsal above, as a test job running PR code could have changed them.


def _shard(fork_rehearsed, index, tmp, **changes) -> bytes:
    """Shard ``index``'s artifact, its results.json edited by ``changes`` (dotted keys)."""
    folder = tmp / f"shard-{index}-{len(list(tmp.iterdir()))}"
    shutil.copytree(fork_rehearsed["play"].artifacts / f"ab-results-{index}", folder)
    data = json.loads((folder / "results.json").read_text())
    for dotted, value in changes.items():
        *path, key = dotted.split(".")
        target = data
        for part in path:
            target = target[part]
        target[key] = value
    (folder / "results.json").write_text(json.dumps(data))
    return zipped(folder)


def _replay(tmp, layout, fork_rehearsed, artifacts, conclusion="success", setup=None):
    """The report workflow on the fork's run RUN_ID whose artifacts are ``artifacts`` ((name,
    zip) pairs); (the fake after it, the job's result, the play)."""
    fake = FakeGitHub(token=TOKEN, owner="sgl", repo="sglang", bot=ACTIONS_BOT).start()
    try:
        head = fork_rehearsed["head"]
        fork_pr(fake, head, FORK)
        for name, data in artifacts:
            serve_artifact(fake, name, data)
        if setup:
            setup(fake)
        base = git(layout, "rev-parse", "main")
        result, _, play = report_fork_run(tmp, fake, layout, base, head, conclusion, FORK)
        return fake, result, play
    finally:
        fake.stop()


def _invalid(fake, result, play, said):
    """The report failed on an invalid artifact and said why: the slot says so, the check run
    carries the reason, and nothing of the artifacts reached the PR."""
    assert result == "failure", play.log
    assert f"error: invalid artifact: {said}" in play.log, play.log
    slot = pr_states.get_slot(fake.bodies[PR], "ab")
    assert slot.startswith(":x: [Run #456]") and slot.endswith("-- invalid artifact"), slot
    (check,) = fake.check_runs.values()
    assert check["output"]["title"] == "Invalid artifact" and said in check["output"]["summary"]
    assert not fake.comments and not fake.statuses


@pytest.fixture
def intact(fork_rehearsed, tmp_path):
    return [(f"ab-results-{i}", _shard(fork_rehearsed, i, tmp_path)) for i in (0, 1)]


def test_the_intact_shards_replayed_are_reported_green(layout, fork_rehearsed, tmp_path, intact):
    fake, result, play = _replay(tmp_path, layout, fork_rehearsed, intact)
    assert result == "success", play.log
    assert pr_states.get_slot(fake.bodies[PR], "ab").startswith(":white_check_mark:")
    assert len(fake.comments) == 1


def test_a_shard_whose_results_are_not_ci_runs_is_named(layout, fork_rehearsed, tmp_path, intact):
    broken = _shard(fork_rehearsed, 1, tmp_path, **{"files": "all green"})
    artifacts = [intact[0], ("ab-results-1", broken)]
    fake, result, play = _replay(tmp_path, layout, fork_rehearsed, artifacts)
    _invalid(fake, result, play, "ab-results-1: ")
    assert "results.json.files: expected a list, got str" in play.log, play.log


def test_a_shard_missing_from_a_successful_run_is_named_and_fails_the_report(
    layout, fork_rehearsed, tmp_path, intact
):
    fake, result, play = _replay(tmp_path, layout, fork_rehearsed, intact[:1])
    _invalid(fake, result, play, "ab-results-1 missing from run 456 (given: 1 of 2)")


def test_a_shard_missing_from_a_failed_run_is_named_and_the_slot_says_failure(
    layout, fork_rehearsed, tmp_path, intact
):
    fake, result, play = _replay(tmp_path, layout, fork_rehearsed, intact[:1], "failure")
    assert result == "success", play.log
    assert "ab-results-1 missing from run 456 (given: 1 of 2)" in play.log
    assert pr_states.get_slot(fake.bodies[PR], "ab").startswith(":x: [Run #456]")
    (check,) = fake.check_runs.values()
    assert check["conclusion"] == "failure" and check["output"]["title"] == "No results: failure"
    assert not fake.comments and not fake.statuses


def test_a_shard_given_twice_is_refused_by_name(layout, fork_rehearsed, tmp_path, intact):
    copy = _shard(fork_rehearsed, 0, tmp_path)
    fake, result, play = _replay(
        tmp_path, layout, fork_rehearsed, [intact[0], ("ab-results-1", copy)]
    )
    _invalid(fake, result, play, "shard 0/2 given twice: ab-results-0 and ab-results-1")


def test_two_artifacts_of_one_shards_name_are_refused(layout, fork_rehearsed, tmp_path, intact):
    fake, result, play = _replay(tmp_path, layout, fork_rehearsed, [*intact, intact[0]])
    _invalid(fake, result, play, "ab-results-0: 2 artifacts of that name in run 456")
    assert not fake.count("GET", r"/zip$")


def test_a_shard_listed_over_the_cap_is_refused_before_any_download(
    layout, fork_rehearsed, tmp_path, intact
):
    def oversized(fake):
        fake.artifacts[RUN_ID][1]["size_in_bytes"] = 256 * 1024 * 1024 + 1

    fake, result, play = _replay(tmp_path, layout, fork_rehearsed, intact, setup=oversized)
    _invalid(fake, result, play, "ab-results-1: 268435457 bytes; at most 268435456")
    assert fake.blob_auth == [None]  # shard 0's only
