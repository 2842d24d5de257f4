"""The drop-in workflows for sglang, rehearsed end to end (``sglang_rehearsal``)."""

import pytest
import sglang_layout
import sglang_rehearsal as rehearsal
from sglang_rehearsal import PR, RUN_ID, git, load, rehearse

from ci import gitcmd
from ci.reporter import pr_states

FORK = "someone/sglang"
BOTH_SHARDS = ("TestReserveSource.test\\_replacement", "TestLayout.test\\_modified")


layout = pytest.fixture(sglang_layout.checkout, scope="module", name="layout")


def _reported(fake, mark, state, head=None):
    """One report: slot ``mark``, one status and check run of ``state``; the sticky comment."""
    assert pr_states.get_slot(fake.bodies[PR], "ab").startswith(mark)
    assert [(s["context"], s["state"]) for s in fake.statuses] == [("ab/base-a-test-cpu", state)]
    (check,) = fake.check_runs.values()
    assert check["conclusion"] == state and head in (None, check["head_sha"])
    assert head in (None, fake.statuses[0]["sha"])
    return next(iter(fake.comments.values()), None)


def test_a_same_repo_pr_runs_every_shard_and_gets_one_report_of_both(layout, tmp_path):
    played = rehearse(tmp_path, layout, "fix")
    fake, play = played["fake"], played["play"]
    assert (played["gate"]["run"], played["gate"]["fork"]) == ("true", "false")
    assert played["gate"]["sha"] == played["head"]
    assert played["shards"] == ["success", "success"] and played["report"] == "success", play.log
    assert sorted(p.name for p in play.artifacts.iterdir()) == ["ab-results-0", "ab-results-1"]
    comment = _reported(fake, ":white_check_mark:", "success")
    assert all(case in comment["body"] for case in BOTH_SHARDS)


def test_the_heads_own_list_of_regressions_judges_its_shards_and_its_report(layout, tmp_path):
    """The head's REGRESSIONS names a test passing on the base: its shard fails, said why."""
    path = load()["env"]["REGRESSIONS"]
    git(layout, "checkout", "-q", "-b", "listed", "fix")
    (layout / path).write_text(f"{sglang_layout.MODIFIED}::*.test_modified\n")
    git(layout, "add", path)
    gitcmd.run(["commit", "-qm", "list"], layout, env=sglang_layout.IDENTITY)
    git(layout, "checkout", "-q", "main")
    played = rehearse(tmp_path, layout, "listed")
    # The modified test (est 2 s) is shard 0's; the added one (1 s) shard 1's.
    assert played["shards"] == ["failure", "success"], played["play"].log
    assert played["report"] == "success", played["play"].log
    fake = played["fake"]  # void: the slot warns, the status fails
    assert pr_states.get_slot(fake.bodies[PR], "ab").startswith(":warning:")
    assert [s["state"] for s in fake.statuses] == ["failure"]
    (comment,) = fake.comments.values()
    assert "the bug did not reproduce: 1 listed regressions pass" in comment["body"]


@pytest.fixture(scope="module")
def fork_rehearsed(layout, tmp_path_factory):
    return rehearse(tmp_path_factory.mktemp("fork"), layout, "fix", fork=FORK)


def test_an_approved_fork_pr_runs_read_only_then_the_workflow_run_reports_every_shard(
    fork_rehearsed,
):
    played, fake = fork_rehearsed, fork_rehearsed["fake"]
    assert (played["gate"]["run"], played["gate"]["fork"]) == ("true", "true"), played["play"].log
    assert played["shards"] == ["success", "success"] and played["report"] == "success"
    # Its token is read-only: the report is in its job summary, and no write was even tried.
    assert BOTH_SHARDS[0] in played["summary"] and played["pr_run_writes"] == []
    assert played["fork_report"] == "success", played["report_play"].log
    comment = _reported(fake, ":white_check_mark: [Run #456]", "success", played["head"])
    assert comment["login"] == "github-actions[bot]"
    assert all(case in comment["body"] for case in BOTH_SHARDS)
    # The bot listed and downloaded each shard's artifact.
    assert fake.count("GET", r"/actions/runs/456/artifacts") == fake.count("GET", r"/zip$") == 2


@pytest.mark.parametrize(
    "shards, conclusion, result, said",
    [
        ([0], "success", "failure", "invalid artifact: ab-results-1 missing from run 456"),
        ([0], "failure", "success", "ab-results-1 missing from run 456 (given: 1 of 2)"),
        ([0, 1, 0], "success", "failure", "ab-results-0: 2 artifacts of that name in run 456"),
    ],
)
def test_the_fork_report_names_a_shard_artifact_missing_or_doubled_and_never_posts_green(
    layout, fork_rehearsed, tmp_path, shards, conclusion, result, said
):
    """The fork rehearsal's own shard artifacts, as PR code in its test jobs could leave them."""
    head, base = fork_rehearsed["head"], git(layout, "rev-parse", "main")
    with rehearsal.new_fake() as fake:
        rehearsal.fork_pr(fake, head, FORK, rehearsal.FORK_BRANCH)
        for shard in shards:
            folder = fork_rehearsed["play"].artifacts / f"ab-results-{shard}"
            fake.serve_artifact(RUN_ID, folder.name, rehearsal.zip_folder(folder))
        got, _, play = rehearsal.report_fork_run(
            tmp_path, fake, layout, base, head, conclusion, FORK
        )
    assert got == result and said in play.log, play.log
    assert pr_states.get_slot(fake.bodies[PR], "ab").startswith(f":x: [Run #{RUN_ID}]")
    (check,) = fake.check_runs.values()
    assert check["conclusion"] == "failure"
    assert not fake.comments and not fake.statuses
