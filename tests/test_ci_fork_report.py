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
    monkeypatch.setattr("ci.reporter.publish.time.sleep", lambda _: None)  # the settle pause
    return main(["report", "--api-url", fake.url, *args])


def test_a_spoofed_marker_comment_by_another_user_is_left_alone(fake, tmp_path, monkeypatch):
    marker = render.comment_marker(SLOT)
    spoof = fake.add_comment(7, marker + "\nfake evidence: all green", login="mallory")
    args = ["--results", str(_results_dir(tmp_path)), "--repo", "sgl/sglang", "--pr", "7"]
    assert _report(fake, monkeypatch, *args, "--sha", HEAD, "--post") == 0
    assert fake.comments[spoof]["body"] == marker + "\nfake evidence: all green"
    ours = [c for c in fake.comments.values() if c["login"] == "github-actions[bot]"]
    assert len(ours) == 1 and ours[0]["body"].startswith(marker)
    assert fake.count("PATCH", r"/comments/") == 0 and fake.count("DELETE", ".*") == 0


@pytest.mark.parametrize(
    "token, given, login",
    [
        (ACTIONS_TOKEN, None, "github-actions[bot]"),  # 403 from GET /user: the Actions bot
        (ACTIONS_TOKEN, "someone[bot]", "someone[bot]"),
        ("ghp_personal", None, "octo"),  # a user's token is asked who it is
    ],
)
def test_the_bot_writes_as_the_login_given_or_the_tokens_own(token, given, login):
    server = FakeGitHub(token=token, bot="octo").start()
    try:
        assert _publisher(server, token).identity(given) == login
        assert server.count("GET", r"/user$") == (given is None)
        with pytest.raises(ValueError, match="marker alone"):
            _publisher(server, token).upsert_comment("<!-- m -->", "<!-- m -->\nx", None)
    finally:
        server.stop()


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


REVIEWED, STARTED, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z"


def _workflow_run(tmp_path, conclusion="success", sha=HEAD, event="pull_request", **extra):
    repository = extra.pop("repository", {"full_name": "sgl/sglang", "default_branch": "main"})
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
            "triggering_actor": {"login": "maint"},
            "created_at": STARTED,
            **extra,
        },
        "repository": repository,
    }
    path.write_text(json.dumps(payload))
    return str(path)


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
    assert pr_states.get_slot(bare.bodies[7], SLOT).startswith(
        ":white_check_mark: [Run #4242](https://github.example/runs/4242)"
    )
    assert len(bare.comments) == 1 and bare.statuses[0]["sha"] == HEAD
    (run,) = bare.check_runs.values()
    assert run["head_sha"] == HEAD and run["conclusion"] == "success"
    assert bare.blob_auth == [None]  # the storage host never saw the token


def _fenced_run_ci(fake):
    fake.add_comment(7, f"I will NOT run this:\n```\n/run-ci {HEAD}\n```", "maint", REVIEWED)


UNAPPROVED = {
    "no-approval": (lambda f: None, {}),  # the fork's own workflow uploaded a green artifact
    "run-ci-in-a-fenced-block": (_fenced_run_ci, {}),
    "approved-after-the-run-started": (lambda f: f.add_review(7, "maint", HEAD, at=LATER), {}),
    "label-by-a-non-writer": (
        lambda f: f.add_review(7, "author", HEAD, "COMMENTED", at=REVIEWED),
        {"triggering_actor": {"login": "author"}},
    ),
}


@pytest.mark.parametrize("setup, run", UNAPPROVED.values(), ids=UNAPPROVED.keys())
def test_a_fork_run_of_an_unapproved_commit_gets_the_label_slot_only(
    bare, tmp_path, monkeypatch, setup, run
):
    _fork_pr(bare, approved=False)
    setup(bare)
    assert _fork_report(bare, monkeypatch, tmp_path, **run) == 0
    assert "No approval of this commit" in pr_states.get_slot(bare.bodies[7], SLOT)
    assert [c["login"] for c in bare.comments.values()] in ([], ["maint"])  # no sticky comment
    assert not bare.statuses and not bare.check_runs and bare.count("GET", r"/artifacts") == 0


@pytest.mark.parametrize("artifact", [None, False], ids=["green-artifact", "no-artifact"])
@pytest.mark.parametrize(
    "conclusion, emoji", [("failure", ":x:"), ("cancelled", ":no_entry_sign:")]
)
def test_a_fork_run_that_did_not_succeed_is_never_green_nor_left_pending(
    bare, tmp_path, monkeypatch, artifact, conclusion, emoji
):
    _fork_pr(bare, m=artifact)
    bare.bodies[7] = pr_states.set_slot("x\n", SLOT, "L", ":hourglass_flowing_sand:")
    assert _fork_report(bare, monkeypatch, tmp_path, conclusion=conclusion) == 0
    assert pr_states.get_slot(bare.bodies[7], SLOT).startswith(emoji)
    assert all(s["state"] != "success" for s in bare.statuses)
    (run,) = bare.check_runs.values()
    assert run["conclusion"] == conclusion


@pytest.mark.parametrize(
    "size, blob, cap",
    [
        (github_io.MAX_ARTIFACT_BYTES + 1, None, None),  # refused before the download
        (100, b"PK" + bytes(10000), 4096),  # bigger than its listing: cut off at the cap
        (None, _zip({"sub/results.json": "{}"}), None),  # results.json not at its top
    ],
    ids=["listed-over-the-cap", "bigger-than-listed", "nested-results"],
)
def test_an_artifact_over_its_cap_or_without_results_json_is_refused(
    bare, tmp_path, monkeypatch, size, blob, cap
):
    if cap:
        monkeypatch.setattr(github_io, "MAX_ARTIFACT_BYTES", cap)
    _fork_pr(bare, size=size, blob=blob)
    assert _fork_report(bare, monkeypatch, tmp_path) == 2
    refused(bare)
    assert bare.count("GET", r"/zip$") == (size != github_io.MAX_ARTIFACT_BYTES + 1)


@pytest.mark.parametrize(
    "setup",
    [lambda f: f.heads.__setitem__(7, "d" * 40), lambda f: f.artifacts.clear()],
    ids=["head-moved-on", "approved-run-ran-no-tests"],
)
def test_a_fork_run_with_nothing_to_report_posts_nothing(bare, tmp_path, monkeypatch, setup):
    _fork_pr(bare)
    setup(bare)
    assert _fork_report(bare, monkeypatch, tmp_path) == 0
    assert bare.bodies_sent == [] and bare.bodies[7] == "Author's text.\n"


@pytest.mark.parametrize("named", ["missing", "folder", "file"])
def test_a_failed_test_job_is_reported_by_the_results_it_left_else_as_a_failure(
    fake, tmp_path, monkeypatch, named
):
    # The change fails a test, so the test job fails on purpose; the results it wrote are the
    # report (green results of a failed job are never green: test_ci_intake.py).
    broken = [file_run(m, [(ci_samples.GROW, "fail")]) for m in ("unmodified", "change")]
    folder = _results_dir(tmp_path, model(broken))
    results = {"missing": tmp_path / "none", "folder": folder, "file": folder / "results.json"}
    args = ["--results", str(results[named]), "--test-result", "failure"]
    args += ["--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD, "--require-head", "--post"]
    assert _report(fake, monkeypatch, *args) == 0
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(":x:")
    if named != "missing":  # by the results, not "no results"
        assert [s["state"] for s in fake.statuses] == ["failure"]
        (ours,) = fake.comments.values()
        assert ours["body"].startswith(render.comment_marker(SLOT))


@pytest.mark.parametrize(
    "run",
    [
        dict(event="push"),
        dict(sha="not-a-sha"),
        dict(conclusion=None),
        dict(created_at=None),
        dict(head_branch=""),
        dict(id=True),
        dict(head_repository="someone/sglang"),
        dict(triggering_actor="maint"),
        dict(triggering_actor=None, actor=["maint"]),
        dict(repository="sgl/sglang"),
    ],
)
def test_workflow_run_payloads_that_are_not_a_finished_pr_run_are_usage_errors(
    fake, tmp_path, monkeypatch, capsys, run
):
    event = _workflow_run(tmp_path, **run)
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
