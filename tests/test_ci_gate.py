"""Approval of the commit a maintainer saw: decide, approvals and ``ci gate``."""

import json

import ci_samples
import pytest
from ci_fake_github import FakeGitHub

from ci.__main__ import main
from ci.reporter import gate
from ci.reporter.gate import Approval, PullFacts

X, Y, Z = "a" * 40, "b" * 40, "c" * 40
TOKEN = "ghs_gateREADtoken"
T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z"


def fork(head=Y, labels=("run-ci",), *approvals):
    return PullFacts(fork=True, pr=7, head=head, labels=frozenset(labels), approvals=approvals)


L, STALE = ("run-ci",), "stale-label"
DECIDE = {
    "branch": (PullFacts(fork=False, pr=7, head=Y), True, "run"),
    "fork-nothing": (fork(Y, ()), False, "missing-label"),
    "label-without-a-review": (fork(Y, L), False, STALE),
    "label-after-reviewing-the-head": (fork(Y, L, Approval("maint", Y, "trigger")), True, "run"),
    "label-after-reviewing-older": (fork(Y, L, Approval("maint", X, "trigger")), False, STALE),
    "trigger-review-no-label": (fork(Y, (), Approval("maint", Y, "trigger")), False, STALE),
    "approving-review-of-the-head": (fork(Y, (), Approval("maint", Y, "review")), True, "run"),
    "approving-review-of-older": (fork(Y, (), Approval("maint", X, "review")), False, STALE),
    "run-ci-comment-naming-the-head": (fork(Y, (), Approval("maint", Y, "comment")), True, "run"),
    "no-head": (fork(None, L, Approval("maint", Y, "review")), False, STALE),
}  # fmt: skip


@pytest.mark.parametrize("facts, run, state", DECIDE.values(), ids=DECIDE.keys())
def test_decide_is_a_truth_table_over_head_labels_and_approvals(facts, run, state):
    decision = gate.decide(facts)
    assert (decision.run, decision.state, decision.sha) == (run, state, facts.head)


def review(login, sha, state="APPROVED", at=T0):
    return {"user": {"login": login}, "commit_id": sha, "state": state, "submitted_at": at}


def comment(login, body, at=T0):
    return {"user": {"login": login}, "body": body, "created_at": at, "updated_at": at}


def test_each_persons_latest_review_counts_and_only_the_triggers_approves_a_label():
    found = gate.approvals(
        [
            review("maint", X, at=T0),
            review("maint", Y, "COMMENTED", at=T1),  # maint's latest: a comment review of Y
            review("other", X, "CHANGES_REQUESTED", at=T0),
            review("other", Y, "PENDING", at=T2),  # not submitted
            review("third", Y, "DISMISSED", at=T2),
            review("fourth", Z, at=T1),
        ],
        [],
        trigger="maint",
    )
    assert set(found) == {Approval("maint", Y, "trigger"), Approval("fourth", Z, "review")}


def test_approvals_made_after_the_run_started_do_not_count_for_it():
    found = gate.approvals(
        [review("maint", Y, at=T2)], [comment("maint", f"/run-ci {Y}", at=T2)], "maint", before=T1
    )
    assert found == ()


@pytest.fixture
def github():
    with FakeGitHub(token=TOKEN) as server:
        server.add_pr(7, "A fork's PR.\n", head_sha=Y, fork="someone/sglang")
        server.pr_meta[7]["labels"] = ["run-ci"]
        server.permissions.update(maint="write", admin="admin", triager="read")
        yield server


def event(action="labeled", sender="maint", head=Y):
    return ci_samples.pull_request(head, action, sender)


def run_gate(github, tmp_path, monkeypatch, payload):
    path = tmp_path / "event.json"
    path.write_text(json.dumps(payload))
    output = tmp_path / "github-output"
    output.unlink(missing_ok=True)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.setattr("ci.reporter.publish.time.sleep", lambda _: None)
    assert main(["gate", "--event", str(path), "--api-url", github.url]) == 0
    return dict(line.split("=", 1) for line in output.read_text().split())


def _review(login, sha, state="COMMENTED", at=T0):
    return lambda github: github.add_review(7, login, sha, state, at=at)


def _comment(login):
    return lambda github: github.add_comment(7, f"/run-ci {Y}", login=login)


def _pushed(github):
    github.heads[7] = Z  # after the label event was sent


REOPENED = {"action": "reopened"}
APPROVALS = {
    # The maintainer reviewed X; the author force-pushed Y; the label event carries Y.
    "label-after-a-push": ([_review("maint", X)], {}, "false", Y),
    "head-moved-after-the-event": ([_review("maint", Y), _pushed], {}, "false", Z),
    "approval-of-the-head": ([_review("admin", Y, "APPROVED")], REOPENED, "true", Y),
    "run-ci-by-a-writer": ([_comment("maint")], {"action": "synchronize"}, "true", Y),
    "run-ci-by-a-reader": ([_comment("triager")], {"action": "synchronize"}, "false", Y),
    "run-ci-by-a-stranger": ([_comment("x")], {"action": "synchronize"}, "false", Y),
    "label-by-a-reader": ([_review("triager", Y)], {"sender": "triager"}, "false", Y),
}  # fmt: skip


@pytest.mark.parametrize("setup, sent, run, sha", APPROVALS.values(), ids=APPROVALS.keys())
def test_a_fork_runs_the_head_github_has_now_only_when_a_writer_approved_it(
    github, tmp_path, monkeypatch, setup, sent, run, sha
):
    for step in setup:
        step(github)
    sent = {"sender": "author"} | sent if "action" in sent else sent
    decided = run_gate(github, tmp_path, monkeypatch, event(**sent, head=Y))
    assert decided == {
        "run": run,
        "fork": "true",
        "state": "run" if run == "true" else "stale-label",
        "sha": sha,
    }


def test_a_branch_of_the_base_repository_runs_without_asking_github(tmp_path, monkeypatch):
    payload = event("synchronize", "author")
    payload["pull_request"]["head"]["repo"]["full_name"] = "sgl/sglang"
    path = tmp_path / "event.json"
    path.write_text(json.dumps(payload))
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "out"))
    assert main(["gate", "--event", str(path)]) == 0
    assert (tmp_path / "out").read_text() == f"run=true\nfork=false\nstate=run\nsha={Y}\n"


def test_a_fork_runs_nothing_when_github_keeps_failing(github, tmp_path, monkeypatch, capsys):
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event()))
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setattr("ci.reporter.publish.time.sleep", lambda _: None)
    for _ in range(5):
        github.fail_next("GET", r"/pulls/7$", 502)
    assert main(["gate", "--event", str(path), "--api-url", github.url]) == 1
    assert "gave up" in capsys.readouterr().err


def test_ten_throwaway_commenters_sorting_first_cannot_crowd_out_a_writer(
    github, tmp_path, monkeypatch
):
    for i in range(30):
        github.add_comment(7, f"/run-ci {Y}", login=f"a{i:02d}")  # logins before "maint"
    github.add_comment(7, f"/run-ci {Y}", login="zz-maint")
    github.permissions["zz-maint"] = "write"
    github.associations["zz-maint"] = "MEMBER"
    decided = run_gate(github, tmp_path, monkeypatch, event("synchronize", "author"))
    assert decided["run"] == "true"
    assert github.count("GET", r"/collaborators/") == 1  # the plausible writer was read first


def test_past_the_bound_the_decision_says_how_many_were_not_checked(
    github, tmp_path, monkeypatch, capsys
):
    from ci.reporter import publish

    for i in range(publish.MAX_APPROVERS + 3):
        github.add_comment(7, f"/run-ci {Y}", login=f"a{i:02d}")
    github.pr_meta[7]["labels"] = []
    decided = run_gate(github, tmp_path, monkeypatch, event("synchronize", "author"))
    assert decided["run"] == "false"
    assert github.count("GET", r"/collaborators/") == publish.MAX_APPROVERS
    assert "3 more naming it were not checked" in capsys.readouterr().err


def test_a_writers_label_less_trigger_does_not_hide_another_writers_approval(
    github, tmp_path, monkeypatch
):
    # admin (OWNER, read first) reopens without the label: no approval; maint's /run-ci is one.
    github.pr_meta[7]["labels"] = []
    github.associations.update(admin="OWNER", maint="MEMBER")
    github.add_review(7, "admin", Y, "COMMENTED")
    github.add_comment(7, f"/run-ci {Y}", login="maint")
    assert run_gate(github, tmp_path, monkeypatch, event("reopened", "admin"))["run"] == "true"


def _edited(edit):
    def write(path):
        payload = event()
        edit(payload)
        path.write_text(json.dumps(payload))

    return write


USAGE = {
    "pull-request-as-text": (_edited(lambda p: p.update(pull_request="7")), "error: event payload"),
    "head-as-text": (_edited(lambda p: p["pull_request"].update(head=Y)), "error: event payload"),
    "repository-as-text": (_edited(lambda p: p.update(repository="sgl/sglang")), "error: "),
    "sender-as-text": (_edited(lambda p: p.update(sender="maint")), "error: "),
    "nested-past-the-parser": (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested"),
    "output-folder-missing": (lambda p: p.write_text("{}"), "error: GITHUB_OUTPUT"),
    "output-a-folder": (lambda p: p.write_text("{}"), "error: GITHUB_OUTPUT"),
    "fork-without-a-token": (lambda p: p.write_text(json.dumps(event())), "GITHUB_TOKEN"),
}


@pytest.mark.parametrize("write, said", USAGE.values(), ids=USAGE.keys())
def test_bad_usage_of_the_gate_is_one_line_exit_2_and_no_request(
    github, tmp_path, monkeypatch, capsys, write, said, request
):
    write(tmp_path / "event.json")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    where = {"output-folder-missing": "missing/out", "output-a-folder": "."}
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / where.get(request.node.callspec.id, "out")))
    if "token" in request.node.callspec.id:
        monkeypatch.delenv("GITHUB_TOKEN")
    assert main(["gate", "--event", str(tmp_path / "event.json"), "--api-url", github.url]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert github.requests == []


def test_a_head_sha_with_a_trailing_line_break_is_no_commit_id():
    payload = event(head=Y + "\n")
    assert gate.event_facts(payload).head is None


@pytest.mark.parametrize(
    "body, approves",
    [
        (f"/run-ci {Y}", True),
        (f"looks fine\r\n/run-ci {Y}  \n", True),
        (f"`\n/run-ci {Y}\n`", False),  # an inline code span over three lines
        (f"<pre>\n/run-ci {Y}\n</pre>", False),
        (f"```\n/run-ci {Y}\n```", False),
        (f"    /run-ci {Y}", False),  # indented code
        (f"> quoted\n/run-ci {Y}", False),  # a quote's lazy continuation
        (f"<!--\n/run-ci {Y}\n-->", False),
        (f"x <!-- a\n/run-ci {Y}\n-->", False),
        (f"not\u2028/run-ci {Y}", False),  # not a CommonMark line ending
        (f"not\u0085/run-ci {Y}", False),
        (f"not\v/run-ci {Y}", False),
        (f"- /run-ci {Y}", False),
        (f"*/run-ci {Y}*", False),
        (f"*a\n/run-ci {Y}\nb*", False),  # emphasis over three lines
        (f"[a\n/run-ci {Y}\nb](https://example.com)", False),  # a link's text
        (f"do not /run-ci {Y}", False),
        (f"/run-ci {Y[:12]}", False),  # not a full commit id
        (f"~~~~text\n/run-ci {Y}\n~~~~\n", False),
        (f"```\n/run-ci {Y}\n", False),  # an unclosed fence runs to the end
        (f"```\ncode\n```\n/run-ci {Y}\n", True),
        (f"> a quote\n\n/run-ci {Y}  \n", True),
        (f"<!-- a template note -->\n/run-ci {Y}\n", True),
    ],
)
def test_only_a_line_of_the_commenters_own_words_approves(body, approves):
    assert gate.run_ci_shas(body) == ([Y] if approves else [])
