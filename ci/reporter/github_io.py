"""The part of ``ci report`` (and of ``ci gate``) that talks to GitHub, through
``ci.reporter.publish``: ``publish`` sends a ``ReportPlan`` (``ci.reporter.plan``); ``fork`` asks
GitHub what a fork run's report needs (its PR, the approval of its commit, its workflow file, its
results artifacts, downloaded within ``MAX_ARTIFACT_BYTES``); ``fork_facts`` reads a fork PR's
approvals for the gate. What GitHub refuses raises ``PublishFailed`` (exit 1), the token redacted;
bad arguments raise ``plan.RequestError`` (exit 2).
"""

import contextlib
import os
from dataclasses import replace

import github3.exceptions

from ci.evidence.model import EvidenceError
from ci.reporter import artifact, gate, render
from ci.reporter.plan import ReportPlan, ReportRequest, RequestError
from ci.reporter.publish import Publisher, PublishFailed, RetryPolicy, TooLarge, connect

MAX_ARTIFACT_BYTES = 256 * 1024 * 1024  # the zip: results.json, report.md, JUnit, logs, pictures


# The pause before the second look at a PR body we wrote (Publisher.settle_s); 0 where one
# writer alone can write it (the tests' rehearsal of the workflows).
SETTLE_ENV = "CI_REPORT_SETTLE_S"


@contextlib.contextmanager
def _github(repo: str, pr: int | None, api_url: str | None, why: str):
    """A ``Publisher`` for ``repo``'s PR ``pr``, with the token in GITHUB_TOKEN; what GitHub
    refuses (or never answers) comes out as PublishFailed, the token redacted."""
    token = os.environ.get("GITHUB_TOKEN")
    if not token:
        raise RequestError(f"{why} needs a token in GITHUB_TOKEN")
    owner, name = repo.split("/")
    settle = os.environ.get(SETTLE_ENV, "")
    try:
        settle_s = float(settle) if settle else Publisher.settle_s
    except ValueError:
        settle_s = -1.0
    if not 0 <= settle_s <= 60:
        raise RequestError(f"{SETTLE_ENV}={settle!r}: seconds from 0 to 60")
    try:
        yield Publisher(connect(token, api_url), owner, name, pr, RetryPolicy(), settle_s=settle_s)
    except (github3.exceptions.GitHubException, RuntimeError, ValueError, OSError) as exc:
        raise PublishFailed(str(exc).replace(token, "***")) from None


def publish(request: ReportRequest, report: ReportPlan, say) -> None:
    """Send ``report``; ``say(line)`` hears each step."""
    with _github(request.repo, request.pr, request.api_url, "--post") as publisher:
        _publish(request, report, publisher, say)


def _publish(request: ReportRequest, report: ReportPlan, publisher: Publisher, say) -> None:
    def superseded(what: str) -> bool:
        """With --require-head, whether a push has moved the PR on; asked before each PR-level
        write (the slot, the comment). Statuses and the check run name their commit, so they
        stay right for ``--sha`` and are still sent."""
        if not request.require_head:
            return False
        head = publisher.pr_head()
        if head == request.sha:
            return False
        say(
            f"PR #{request.pr} head is {head[:12] or 'unknown'}, not {request.sha[:12]}: "
            f"this run is superseded (or not this PR's); {what}"
        )
        return True

    if superseded("nothing posted"):
        return
    outcome = publisher.update_slot(request.slot, request.slot_label, list(report.texts))
    say(f"PR body slot {request.slot}: {outcome}")
    moved = superseded("our slot write is undone and the comment skipped")
    if moved and outcome == "updated":
        back = publisher.put_back_slot(request.slot, request.slot_label)
        say(f"PR body slot {request.slot}: {back}")
    if report.comment is not None and not moved:
        marker = render.comment_marker(request.slot)
        login = publisher.identity(request.bot_login)
        result = publisher.upsert_comment(marker, report.comment, login)
        say(f"sticky comment ({login}): {result}")
    for status in report.statuses:
        publisher.set_status(request.sha, **status)
        say(f"status {status['context']}: {status['state']}")
    if report.comment is not None and not request.sha:
        say("statuses: skipped (no --sha)")
    if report.check_run is not None:
        check = report.check_run
        run_id = publisher.create_check_run(check["create"], check.get("updates", []))
        say(f"check run {run_id}: {check['create']['conclusion']}")


def fork(request: ReportRequest, folder: str):
    """(request, note) for a fork run, with everything but the raw outcomes asked of GitHub:
    the open PR whose head is the run's head, whether someone with write permission approved
    that commit before the run started, each results artifact's size before it is downloaded into ``folder`` (one, or
    with ``shards`` one per shard: NAME-0 .. NAME-(N-1)). ``note`` (or None) is a line for the
    log. (None, why) when there is nothing to report: no such PR, or an approved run that ran
    no tests."""
    run = gate.finished_run(gate.load_event(request.workflow_run))
    with _github(request.repo, None, request.api_url, "--workflow-run (it reads GitHub)") as github:
        owner = (run.head_repo or "").split("/")[0]
        pulls = [
            pull
            for pull in github.open_pulls(owner, run.head_branch)
            if (pull.get("head") or {}).get("sha") == run.head_sha
            and ((pull.get("head") or {}).get("repo") or {}).get("full_name") == run.head_repo
        ]
        if len(pulls) != 1:
            return None, f"{len(pulls)} open PRs have head {run.head_sha[:12]}: nothing posted"
        request = replace(request, pr=pulls[0]["number"])
        github.number = request.pr
        decision = gate.decide(github.pull_facts(run.actor, run.created_at))
        if decision.sha != run.head_sha:
            return None, f"PR #{request.pr} moved on from {run.head_sha[:12]}: nothing posted"
        if not decision.run:
            return replace(request, state=decision.state), None
        names = artifact.names(request.artifact, request.shards)
        listed = {name: github.artifacts_named(run.run_id, name) for name in names}
        ran = run.conclusion in ("success", "skipped")
        if not any(listed.values()):
            if ran:
                return None, f"run {run.run_id} left no {', '.join(names)}: it ran no tests"
            return replace(request, test_result=run.conclusion), None
        twice, missing = artifact.listing_problem(run.run_id, listed)
        if twice or (missing and ran):
            return replace(request, invalid=twice or missing), None
        if missing:  # a shard's job ended before its upload: the slot says so, as for one
            return replace(request, test_result=run.conclusion), missing
        folders = tuple(os.path.join(folder, name) for name in names)
        for name, into in zip(names, folders, strict=True):
            try:
                artifact.fetch(github, listed[name][0], into, MAX_ARTIFACT_BYTES)
            except (TooLarge, EvidenceError) as exc:
                return replace(request, invalid=f"{name}: {exc}"), None
        # The conclusion stays: green results of a run that did not succeed are never green.
        if request.shards is None:
            return replace(request, results=folders[0], test_result=run.conclusion), None
        return replace(
            request, results=folders, shard_artifacts=names, test_result=run.conclusion
        ), None


def fork_facts(event: dict, pr: int | None, api_url: str | None) -> gate.PullFacts:
    """A fork PR's head, labels and approvals as GitHub has them now (the payload's are a
    snapshot of the moment it was sent)."""
    try:
        repo = gate.field_object(event, "repository", "repository").get("full_name")
        sender = gate.field_object(event, "sender", "sender").get("login")
    except ValueError as exc:
        raise RequestError(f"event payload: {exc}") from None
    if not isinstance(repo, str) or repo.count("/") != 1 or pr is None:
        raise RequestError("a fork PR's approvals are read from GitHub: the payload's repository "
                           "and PR number are needed")  # fmt: skip
    with _github(repo, pr, api_url, "reading a fork PR's approvals") as github:
        return github.pull_facts(trigger=sender if isinstance(sender, str) else None)
