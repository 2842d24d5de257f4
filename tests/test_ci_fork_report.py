"""A fork PR's report (``ci report --workflow-run``): GitHub's account of the finished run, the
approval of exactly that commit, the artifact fetched within its cap, and the identity the bot
writes with (a marker alone never adopts a comment); the check run and its annotations.
"""

import json
from dataclasses import replace

import ci_samples
import pytest
from ci_fake_github import FakeGitHub
from ci_samples import FILE, file_run, model, posted, refused

from ci.__main__ import main
from ci.evidence import model as evidence_model
from ci.evidence.model import save
from ci.reporter import checks, github_io, pr_states, render
from ci.reporter.publish import Publisher, RetryPolicy, connect

ACTIONS_TOKEN = "ghs_actionsINSTALLATIONtoken"


HEAD = "c0ffee" + "0" * 34


SLOT = "dsv4-workspace"
RUN = {"id": 4242, "html_url": "https://github.example/runs/4242"}


@pytest.fixture
def fake():
    server = FakeGitHub(token=ACTIONS_TOKEN, bot="github-actions[bot]").start()
    server.add_pr(7, "Author's text.\n", head_sha=HEAD)
    yield server
    server.stop()


def _publisher(fake, token=ACTIONS_TOKEN):
    policy = RetryPolicy(sleep=lambda _: None, base_s=0.01)
    return Publisher(connect(token, fake.url), "sgl", "sglang", 7, policy, log=lambda _: None)


def _results_dir(tmp_path, m=None, name="ci-results"):
    folder = tmp_path / name
    folder.mkdir()
    save(m or posted(), str(folder))
    return folder


def _report(fake, monkeypatch, *args):
    monkeypatch.setenv("GITHUB_TOKEN", ACTIONS_TOKEN)
    monkeypatch.setattr(
        "ci.reporter.publish.time.sleep", lambda _: None
    )  # the 3 s settle after a write
    return main(["report", "--api-url", fake.url, *args])


def _nothing_green(server):
    slot = pr_states.get_slot(server.bodies[7], SLOT)
    assert not slot.startswith(":white_check_mark:"), slot
    assert all(s["state"] != "success" for s in server.statuses), server.statuses
    assert all(r["conclusion"] != "success" for r in server.check_runs.values())
    return slot


def test_a_spoofed_marker_comment_by_another_user_is_left_alone(fake, tmp_path, monkeypatch):
    marker = render.comment_marker("dsv4-workspace")
    spoof = fake.add_comment(7, marker + "\nfake evidence: all green", login="mallory")
    args = ["--results", str(_results_dir(tmp_path)), "--repo", "sgl/sglang", "--pr", "7"]
    assert _report(fake, monkeypatch, *args, "--sha", HEAD, "--post") == 0
    assert fake.comments[spoof]["body"] == marker + "\nfake evidence: all green"
    ours = [c for c in fake.comments.values() if c["login"] == "github-actions[bot]"]
    assert len(ours) == 1 and ours[0]["body"].startswith(marker)
    assert fake.count("PATCH", r"/comments/") == 0 and fake.count("DELETE", ".*") == 0


def test_an_actions_token_gets_403_from_get_user_and_writes_as_github_actions_bot(fake):
    assert _publisher(fake).identity() == "github-actions[bot]"
    assert fake.count("GET", r"/user$") == 1
    assert _publisher(fake).identity("someone[bot]") == "someone[bot]"


def test_a_user_token_is_asked_who_it_is():
    server = FakeGitHub(token="ghp_personal", bot="octo").start()
    try:
        assert _publisher(server, token="ghp_personal").identity() == "octo"
    finally:
        server.stop()


def test_upsert_without_an_author_is_refused(fake):
    with pytest.raises(ValueError, match="marker alone"):
        _publisher(fake).upsert_comment("<!-- m -->", "<!-- m -->\nx", None)


def test_a_fork_prs_read_only_token_fails_cleanly_and_changes_nothing(tmp_path, monkeypatch):
    server = FakeGitHub(token=ACTIONS_TOKEN, read_only=True).start()
    try:
        server.add_pr(7, "Author's text.\n", head_sha=HEAD)
        args = ["--results", str(_results_dir(tmp_path)), "--repo", "sgl/sglang", "--pr", "7"]
        assert _report(server, monkeypatch, *args, "--post") == 1
        assert server.bodies[7] == "Author's text.\n" and not server.comments
        assert server.count("PATCH") == 1  # the first write is refused, nothing more is tried
    finally:
        server.stop()


WORKFLOW = ".github/workflows/pr-test-dsv4-workspace.yml"


REVIEWED, STARTED, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z"


def _workflow_run(tmp_path, conclusion="success", sha=HEAD, event="pull_request", **extra):
    path = tmp_path / "event.json"
    payload = {
        "action": "completed",
        "workflow_run": {
            **RUN,
            "event": event,
            "head_sha": sha,
            "conclusion": conclusion,
            "head_repository": {"full_name": "someone/sglang"},
            "head_branch": "fix",
            "path": WORKFLOW,
            "triggering_actor": {"login": "maint"},
            "created_at": STARTED,
            **extra,
        },
        "repository": {"full_name": "sgl/sglang", "default_branch": "main"},
    }
    path.write_text(json.dumps(payload))
    return str(path)


def _repository_as_text(tmp_path):
    path = _workflow_run(tmp_path)
    with open(path) as handle:
        payload = json.load(handle)
    payload["repository"] = "sgl/sglang"
    with open(path, "w") as handle:
        json.dump(payload, handle)
    return path


def _zip(files: dict) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _fork_pr(fake, m=None, approved=True, size=None, blob=None):
    """PR 7 from someone/sglang:fix at HEAD, labelled run-ci after the maintainer reviewed HEAD
    (before run 4242 started), the bot's code and workflow as on main, and the run's artifact."""
    fake.add_pr(7, "Author's text.\n", head_sha=HEAD, fork="someone/sglang")
    fake.pr_meta[7].update(branch="fix", labels=["run-ci"])
    fake.permissions["maint"] = "write"
    if approved:
        fake.add_review(7, "maint", HEAD, "COMMENTED", at=REVIEWED)
    if m is not False:
        data = json.dumps((m or posted()).to_json())
        blob = blob if blob is not None else _zip({"results.json": data, "report.md": "x"})
        fake.blobs[90] = blob
        sized = len(blob) if size is None else size
        fake.artifacts[4242] = [{"id": 90, "name": "dsv4-results", "size_in_bytes": sized}]


def _fork_report(fake, monkeypatch, tmp_path, **run):
    return _report(fake, monkeypatch, "--workflow-run", _workflow_run(tmp_path, **run), "--post")


@pytest.fixture
def bare():
    server = FakeGitHub(token=ACTIONS_TOKEN, bot="github-actions[bot]").start()
    yield server
    server.stop()


def test_workflow_run_posts_slot_comment_status_and_check_run_for_an_approved_fork(
    bare, tmp_path, monkeypatch
):
    _fork_pr(bare)
    assert _fork_report(bare, monkeypatch, tmp_path) == 0
    assert pr_states.get_slot(bare.bodies[7], "dsv4-workspace").startswith(
        ":white_check_mark: [Run #4242](https://github.example/runs/4242)"
    )
    assert len(bare.comments) == 1 and bare.statuses[0]["sha"] == HEAD
    (run,) = bare.check_runs.values()
    assert run["head_sha"] == HEAD and run["conclusion"] == "success"
    assert bare.blob_auth == [None]  # the storage host never saw the token


def _one_sided():
    data = posted().to_json()
    data["modes"] = ["change"]
    del data["sides"]["unmodified"]
    del data["files"][0]["modes"]["unmodified"]
    for case in data["cases"]:
        case["modes"].pop("unmodified")
    return evidence_model.Results.from_json(data)


def test_a_fork_runs_results_with_only_the_change_side_are_a_failure_not_green(
    bare, tmp_path, monkeypatch
):
    _fork_pr(bare, m=_one_sided())
    assert _fork_report(bare, monkeypatch, tmp_path) == 0
    assert pr_states.get_slot(bare.bodies[7], "dsv4-workspace").startswith(":x:")
    (run,) = bare.check_runs.values()
    assert run["conclusion"] == "failure" and "no unmodified side" in run["output"]["summary"]


def test_a_forged_green_artifact_of_an_unapproved_commit_gets_the_label_slot_only(
    bare, tmp_path, monkeypatch
):
    # The fork's own workflow skipped the gate and uploaded a green results.json.
    _fork_pr(bare, approved=False)
    assert _fork_report(bare, monkeypatch, tmp_path) == 0
    assert "No approval of this commit" in pr_states.get_slot(bare.bodies[7], "dsv4-workspace")
    assert not bare.comments and not bare.statuses and not bare.check_runs
    assert bare.count("GET", r"/artifacts") == 0


def test_a_writers_run_ci_quoted_in_a_fenced_block_posts_nothing_green_for_a_fork(
    bare, tmp_path, monkeypatch
):
    _fork_pr(bare, approved=False)
    bare.add_comment(7, f"I will NOT run this:\n```\n/run-ci {HEAD}\n```", "maint", REVIEWED)
    assert _fork_report(bare, monkeypatch, tmp_path) == 0
    assert "No approval of this commit" in pr_states.get_slot(bare.bodies[7], "dsv4-workspace")
    assert [c["login"] for c in bare.comments.values()] == ["maint"]  # no sticky comment
    assert not bare.statuses and not bare.check_runs


def test_a_label_approval_made_after_the_run_started_does_not_count_for_it(
    bare, tmp_path, monkeypatch
):
    _fork_pr(bare, approved=False)
    bare.add_review(7, "maint", HEAD, "APPROVED", at=LATER)
    assert _fork_report(bare, monkeypatch, tmp_path) == 0
    assert not bare.comments and not bare.statuses and not bare.check_runs


def test_a_run_triggered_by_someone_without_write_permission_is_not_approved_by_the_label(
    bare, tmp_path, monkeypatch
):
    _fork_pr(bare, approved=False)
    bare.add_review(7, "author", HEAD, "COMMENTED", at=REVIEWED)
    event = {"triggering_actor": {"login": "author"}}
    assert _fork_report(bare, monkeypatch, tmp_path, **event) == 0
    assert not bare.comments and not bare.statuses


@pytest.mark.parametrize(
    "conclusion, emoji", [("failure", ":x:"), ("cancelled", ":no_entry_sign:")]
)
def test_a_fork_run_that_did_not_succeed_never_posts_green_from_a_green_artifact(
    bare, tmp_path, monkeypatch, conclusion, emoji
):
    _fork_pr(bare)  # a green results artifact
    assert _fork_report(bare, monkeypatch, tmp_path, conclusion=conclusion) == 0
    slot = _nothing_green(bare)
    assert slot.startswith(emoji) and f"result is {conclusion}" in slot, slot
    (run,) = bare.check_runs.values()
    assert run["conclusion"] == conclusion


def test_an_artifact_over_the_cap_is_refused_before_it_is_downloaded(bare, tmp_path, monkeypatch):
    _fork_pr(bare, size=github_io.MAX_ARTIFACT_BYTES + 1)
    assert _fork_report(bare, monkeypatch, tmp_path) == 2
    refused(bare)
    assert bare.count("GET", r"/zip$") == 0 and bare.blob_auth == []


def test_an_artifact_bigger_than_its_listing_says_is_cut_off_at_the_cap(
    bare, tmp_path, monkeypatch
):

    monkeypatch.setattr(github_io, "MAX_ARTIFACT_BYTES", 4096)
    _fork_pr(bare, blob=b"PK" + bytes(10000), size=100)
    assert _fork_report(bare, monkeypatch, tmp_path) == 2
    refused(bare)


@pytest.mark.parametrize(
    "files", [{"report.md": "no results"}, {"sub/results.json": "{}"}], ids=["none", "nested"]
)
def test_an_artifact_without_results_json_at_its_top_is_refused(bare, tmp_path, monkeypatch, files):
    _fork_pr(bare, blob=_zip(files))
    assert _fork_report(bare, monkeypatch, tmp_path) == 2
    refused(bare)


def test_workflow_run_for_a_pr_whose_head_moved_on_posts_nothing(bare, tmp_path, monkeypatch):
    _fork_pr(bare)
    bare.heads[7] = "d" * 40  # a newer push
    assert _fork_report(bare, monkeypatch, tmp_path) == 0
    assert bare.bodies_sent == [] and bare.bodies[7] == "Author's text.\n"


def test_an_approved_run_that_ran_no_tests_posts_nothing(bare, tmp_path, monkeypatch):
    _fork_pr(bare, m=False)  # an unrelated label's run: the gate ran, the tests did not
    assert _fork_report(bare, monkeypatch, tmp_path) == 0
    assert bare.bodies_sent == []


@pytest.mark.parametrize(
    "conclusion, emoji", [("cancelled", ":no_entry_sign:"), ("failure", ":x:")]
)
def test_a_run_that_left_no_results_never_leaves_the_slot_pending(
    bare, tmp_path, monkeypatch, conclusion, emoji
):
    _fork_pr(bare, m=False)
    bare.bodies[7] = pr_states.set_slot("x\n", "dsv4-workspace", "L", ":hourglass_flowing_sand:")
    assert _fork_report(bare, monkeypatch, tmp_path, conclusion=conclusion) == 0
    assert pr_states.get_slot(bare.bodies[7], "dsv4-workspace").startswith(emoji)
    (run,) = bare.check_runs.values()
    assert run["conclusion"] == conclusion


def test_same_repo_report_after_a_timed_out_test_job_says_failure(fake, tmp_path, monkeypatch):
    args = ["--results", str(tmp_path / "missing"), "--test-result", "failure"]
    args += ["--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD, "--require-head", "--post"]
    assert _report(fake, monkeypatch, *args) == 0
    assert pr_states.get_slot(fake.bodies[7], "dsv4-workspace") == ":x:"


@pytest.mark.parametrize("named", ["folder", "file"])
def test_a_failed_test_job_that_left_results_is_reported_by_them_however_they_are_named(
    fake, tmp_path, monkeypatch, named
):
    # The change fails a test, so the test job fails on purpose; the results it wrote are the
    # report (green results of a failed job are never green: test_ci_intake.py).
    broken = [file_run(m, [(ci_samples.GROW, "fail")]) for m in ("unmodified", "change")]
    folder = _results_dir(tmp_path, model(broken))
    results = folder if named == "folder" else folder / "results.json"
    args = ["--results", str(results), "--test-result", "failure"]
    args += ["--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD, "--require-head", "--post"]
    assert _report(fake, monkeypatch, *args) == 0
    assert [s["state"] for s in fake.statuses] == ["failure"]  # by the results, not "no results"
    (ours,) = [c for c in fake.comments.values() if c["login"] == "github-actions[bot]"]
    assert ours["body"].startswith(render.comment_marker("dsv4-workspace"))


def test_workflow_run_payloads_that_are_not_a_finished_pr_run_are_usage_errors(
    fake, tmp_path, monkeypatch, capsys
):
    for event in (
        _workflow_run(tmp_path, event="push"),
        _workflow_run(tmp_path, sha="not-a-sha"),
        _workflow_run(tmp_path, conclusion=None),
        _workflow_run(tmp_path, path="../../etc/passwd"),
        _workflow_run(tmp_path, created_at=None),
        _workflow_run(tmp_path, head_repository="someone/sglang"),
        _workflow_run(tmp_path, triggering_actor="maint"),
        _workflow_run(tmp_path, triggering_actor=None, actor=["maint"]),
        _repository_as_text(tmp_path),
    ):
        assert _report(fake, monkeypatch, "--workflow-run", event) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: workflow_run report: ") and len(err.splitlines()) == 1, err
    assert fake.requests == []


def test_check_run_has_the_table_and_a_notice_at_the_regression_tests_line(fake):
    m = model()
    m = replace(m, cases=[replace(m.cases[0], line=123), *m.cases[1:]])
    create, updates = checks.bodies(m, HEAD, render.comment(m, "s"), "2026-01-01T00:00:00Z")
    _publisher(fake).create_check_run(create, updates)
    (run,) = fake.check_runs.values()
    assert (
        "| Case | Verdict | sglang 0.5.23 | sglang 0.5.23 + this change |"
        in run["output"]["summary"]
    )
    (note,) = run["annotations"]
    assert note == {
        "path": FILE,
        "start_line": 123,
        "end_line": 123,
        "annotation_level": "notice",
        "title": "TestSparsePrefillKVBufferReplacement.test_grow_64_to_96_mib_bf16_peaks_at_96_mib",
        "message": "fail on sglang 0.5.23 (peak 160.0 MiB); passes on sglang 0.5.23 + this "
        "change (peak 96.0 MiB)",
    }


def test_120_annotations_go_out_50_per_request_and_broken_cases_are_failures(fake):
    names = [f"test_case_{i:03d}" for i in range(120)]
    failing = "Traceback (most recent call last):\n  AssertionError"
    runs = [
        file_run("unmodified", [(n, "fail", failing) for n in names]),
        file_run("change", [(n, "pass") for n in names[:-1]] + [(names[-1], "fail", failing)]),
    ]
    m = model(runs, patterns=[], suite="s")
    create, updates = checks.bodies(m, HEAD, "summary", "2026-01-01T00:00:00Z")
    assert [len(u["annotations"]) for u in updates] == [50, 20]
    _publisher(fake).create_check_run(create, updates)
    (run,) = fake.check_runs.values()
    levels = [a["annotation_level"] for a in run["annotations"]]
    assert len(levels) == 120 and levels.count("failure") == 1 and run["conclusion"] == "failure"
    assert fake.count("PATCH", r"/check-runs/\d+$") == 2
