"""A fork PR's report (``ci report --workflow-run``): run, approval, artifact, identity."""

import json
from dataclasses import replace

import ci_samples
import pytest
from ci_fake_github import FakeGitHub, zipped
from ci_samples import CLS, FILE, GROW, HEAD, PR, SLOT, TOKEN, file_run, model, refused, report

from ci.reporter import github_io, pr_states, render

fake = pytest.fixture(ci_samples.pr_fake, name="fake")


def test_a_spoofed_marker_comment_by_another_user_is_left_alone(fake, tmp_path, monkeypatch):
    marker = render.comment_marker(SLOT)
    spoof = fake.add_comment(7, marker + "\nfake evidence: all green", login="mallory")
    folder = str(ci_samples.results_folder(tmp_path / "r"))
    assert report(fake, monkeypatch, "--results", folder, *PR, "--sha", HEAD, "--post") == 0
    assert fake.comments[spoof]["body"] == marker + "\nfake evidence: all green"
    ours = [c for c in fake.comments.values() if c["login"] == "github-actions[bot]"]
    assert len(ours) == 1 and ours[0]["body"].startswith(marker)
    assert fake.count("PATCH", r"/comments/") == 0 and fake.count("DELETE", ".*") == 0


@pytest.mark.parametrize(
    "token, given, login",
    [
        (TOKEN, None, "github-actions[bot]"),  # 403 from GET /user: the Actions bot
        (TOKEN, "someone[bot]", "someone[bot]"),
        ("ghp_personal", None, "octo"),  # a user's token is asked who it is
    ],
)
def test_the_bot_writes_as_the_login_given_or_the_tokens_own(token, given, login):
    with FakeGitHub(token=token, bot="octo") as server:
        assert ci_samples.publisher(server).identity(given) == login
        assert server.count("GET", r"/user$") == (given is None)


def test_a_fork_prs_read_only_token_fails_cleanly_and_changes_nothing(tmp_path, monkeypatch):
    with FakeGitHub(token=TOKEN, read_only=True) as server:
        server.add_pr(7, "Author's text.\n", head_sha=HEAD)
        args = ["--results", str(ci_samples.results_folder(tmp_path / "r")), *PR, "--post"]
        assert report(server, monkeypatch, *args) == 1
        assert server.bodies[7] == "Author's text.\n" and not server.comments
        assert server.count("PATCH") == 1  # the first write is refused, nothing more is tried


LATER = "2026-01-01T00:10:00Z"  # after run 4242 started


def _fork_pr(fake, m=None, approved=True, size=None, blob=None):
    """``ci_samples.fork_pr`` and run 4242's artifact of ``m``'s results (False: none)."""
    ci_samples.fork_pr(fake, approved=approved)
    if m is not False:
        data = json.dumps((m or ci_samples.posted()).to_json())
        blob = blob if blob is not None else zipped({"results.json": data, "report.md": "x"})
        fake.serve_artifact(4242, "dsv4-results", blob, size)


def _fork_report(fake, monkeypatch, tmp_path, **run):
    event = ci_samples.workflow_run(tmp_path / "event.json", **run)
    return report(fake, monkeypatch, "--workflow-run", event, "--post")


def test_workflow_run_posts_slot_comment_status_and_check_run_for_an_approved_fork(
    fake, tmp_path, monkeypatch
):
    _fork_pr(fake)
    assert _fork_report(fake, monkeypatch, tmp_path) == 0
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(
        ":white_check_mark: [Run #4242](https://github.example/runs/4242)"
    )
    assert len(fake.comments) == 1 and fake.statuses[0]["sha"] == HEAD
    (run,) = fake.check_runs.values()
    assert run["head_sha"] == HEAD and run["conclusion"] == "success"
    assert fake.blob_auth == [None]  # the storage host never saw the token


UNAPPROVED = {
    "no-approval": (lambda f: None, {}),  # the fork's own workflow uploaded a green artifact
    "approved-after-the-run-started": (lambda f: f.add_review(7, "maint", HEAD, at=LATER), {}),
}


@pytest.mark.parametrize("setup, run", UNAPPROVED.values(), ids=UNAPPROVED.keys())
def test_a_fork_run_of_an_unapproved_commit_gets_the_label_slot_only(
    fake, tmp_path, monkeypatch, setup, run
):
    _fork_pr(fake, approved=False)
    setup(fake)
    assert _fork_report(fake, monkeypatch, tmp_path, **run) == 0
    assert "No approval of this commit" in pr_states.get_slot(fake.bodies[7], SLOT)
    assert [c["login"] for c in fake.comments.values()] in ([], ["maint"])  # no sticky comment
    assert not fake.statuses and not fake.check_runs and fake.count("GET", r"/artifacts") == 0


@pytest.mark.parametrize("artifact", [None, False], ids=["green-artifact", "no-artifact"])
@pytest.mark.parametrize(
    "conclusion, emoji", [("failure", ":x:"), ("cancelled", ":no_entry_sign:")]
)
def test_a_fork_run_that_did_not_succeed_is_never_green_nor_left_pending(
    fake, tmp_path, monkeypatch, artifact, conclusion, emoji
):
    _fork_pr(fake, m=artifact)
    fake.bodies[7] = pr_states.set_slot("x\n", SLOT, "L", ":hourglass_flowing_sand:")
    assert _fork_report(fake, monkeypatch, tmp_path, conclusion=conclusion) == 0
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(emoji)
    assert all(s["state"] != "success" for s in fake.statuses)
    (run,) = fake.check_runs.values()
    assert run["conclusion"] == conclusion


@pytest.mark.parametrize(
    "size, blob, cap",
    [
        (github_io.MAX_ARTIFACT_BYTES + 1, None, None),  # refused before the download
        (100, b"PK" + bytes(10000), 4096),  # bigger than its listing: cut off at the cap
        (None, zipped({"sub/results.json": "{}"}), None),  # results.json not at its top
    ],
    ids=["listed-over-the-cap", "bigger-than-listed", "nested-results"],
)
def test_an_artifact_over_its_cap_or_without_results_json_is_refused(
    fake, tmp_path, monkeypatch, size, blob, cap
):
    if cap:
        monkeypatch.setattr(github_io, "MAX_ARTIFACT_BYTES", cap)
    _fork_pr(fake, size=size, blob=blob)
    assert _fork_report(fake, monkeypatch, tmp_path) == 2
    refused(fake)
    assert fake.count("GET", r"/zip$") == (size != github_io.MAX_ARTIFACT_BYTES + 1)


@pytest.mark.parametrize(
    "setup",
    [lambda f: f.heads.__setitem__(7, "d" * 40), lambda f: f.artifacts.clear()],
    ids=["head-moved-on", "approved-run-ran-no-tests"],
)
def test_a_fork_run_with_nothing_to_report_posts_nothing(fake, tmp_path, monkeypatch, setup):
    _fork_pr(fake)
    setup(fake)
    assert _fork_report(fake, monkeypatch, tmp_path) == 0
    assert fake.bodies_sent == [] and fake.bodies[7] == "Author's text.\n"


@pytest.mark.parametrize(
    "run",
    [
        dict(event="push"),
        dict(head_sha="not-a-sha"),
        dict(conclusion=None),
        dict(created_at=None),
        dict(head_repository="someone/sglang"),
        dict(triggering_actor="maint"),
        dict(triggering_actor=None, actor=["maint"]),
        dict(repository="sgl/sglang"),
    ],
)
def test_workflow_run_payloads_that_are_not_a_finished_pr_run_are_usage_errors(
    fake, tmp_path, monkeypatch, capsys, run
):
    event = ci_samples.workflow_run(tmp_path / "event.json", **run)
    assert report(fake, monkeypatch, "--workflow-run", event) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: workflow_run report: ") and len(err.splitlines()) == 1, err
    assert fake.requests == []


def test_check_run_has_the_table_and_a_notice_at_the_regression_tests_line(fake):
    m = model()
    m = replace(m, cases=[replace(m.cases[0], line=123), *m.cases[1:]])
    check = render.check_run(m, HEAD, render.comment(m, "s"), "2026-01-01T00:00:00Z")
    ci_samples.publisher(fake).create_check_run(**check)
    (run,) = fake.check_runs.values()
    assert run["output"]["summary"].startswith(render.comment_marker("s"))
    (note,) = run["annotations"]
    assert note == {"path": FILE, "start_line": 123, "end_line": 123, "annotation_level": "notice",
                    "title": f"{CLS}.{GROW}", "message": "fixed by this PR: sglang 0.5.23: Fail \u00b7 "
                    "peak 160.0 MiB; sglang 0.5.23 + this change: Pass \u00b7 peak 96.0 MiB"}  # fmt: skip


def test_120_annotations_go_out_50_per_request_and_broken_cases_are_failures(fake):
    names = [f"test_case_{i:03d}" for i in range(120)]
    failing = "Traceback (most recent call last):\n  AssertionError"
    runs = [
        file_run("unmodified", [(n, "fail", failing) for n in names]),
        file_run("change", [(n, "pass") for n in names[:-1]] + [(names[-1], "fail", failing)]),
    ]
    m = model(runs, patterns=[], suite="s")
    check = render.check_run(m, HEAD, "summary", "2026-01-01T00:00:00Z")
    assert [len(u["annotations"]) for u in check["updates"]] == [50, 20]
    ci_samples.publisher(fake).create_check_run(**check)
    (run,) = fake.check_runs.values()
    levels = [a["annotation_level"] for a in run["annotations"]]
    assert len(levels) == 120 and levels.count("failure") == 1 and run["conclusion"] == "failure"
    assert fake.count("PATCH", r"/check-runs/\d+$") == 2
