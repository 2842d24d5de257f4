"""Whether a PR's head commit may run CI (THREATS G1), and the trusted facts of the events.
``decide`` is pure: a base-repository branch runs; a fork's head runs only when someone with
write permission approved exactly that commit (``Publisher.pull_facts`` gathers who did)."""

import datetime
import json
import re
from collections import namedtuple

RUN_LABEL = "run-ci"
COMMIT_SHA = re.compile(r"[0-9a-f]{40}")  # a full commit id, as GitHub sends it
RUN_COMMENT = re.compile(r"/run-ci +([0-9a-f]{40})")  # a whole line of the comment
SUBMITTED = ("APPROVED", "COMMENTED", "CHANGES_REQUESTED")  # not PENDING, not DISMISSED
WRITE = ("admin", "write")  # GitHub's ``permission`` field; maintain reads as write
# GitHub's ``author_association``, most plausible writer first: it orders, never approves.
ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR")


# ``login`` saw commit ``sha``; ``via`` ("review" | "comment" | "trigger") is how they said so;
# association: GitHub's author_association (None where it sent none).
Approval = namedtuple("Approval", "login sha via association", defaults=(None,))


# What the decision reads. approvals: only of people with write permission; unchecked: people
# naming the head whose permission was not read (the bound).
PullFacts = namedtuple(
    "PullFacts", "fork pr head labels approvals unchecked", defaults=(frozenset(), (), 0)
)


# state: run | missing-label | stale-label; sha: the head commit the decision is about.
Gate = namedtuple("Gate", "run fork reason state sha", defaults=("run", None))


_HOW = {"review": "an approving review of it", "comment": "a /run-ci comment naming it",
        "trigger": "their last review was of it"}  # fmt: skip


def decide(facts: PullFacts) -> Gate:
    where, label = dict(fork=facts.fork, sha=facts.head), RUN_LABEL in facts.labels
    if not facts.fork:
        return Gate(run=True, reason="branch of the base repository", **where)
    # An approval is a full commit id: none matches a head of None.
    seen = [a for a in facts.approvals if a.sha == facts.head and (a.via != "trigger" or label)]
    if seen:
        who = seen[0]
        reason = f"fork: {who.login} approved {facts.head[:12]} ({_HOW[who.via]})"
        return Gate(run=True, reason=reason, **where)
    if label or facts.approvals or facts.unchecked:
        reason = f"fork: no one with write permission approved {facts.head}, the head now"
        if facts.unchecked:
            reason += f" ({facts.unchecked} more naming it were not checked: the bound)"
        return Gate(run=False, state="stale-label", reason=reason, **where)
    return Gate(run=False, state="missing-label", reason=f"fork without {RUN_LABEL!r}", **where)


def event_facts(event: dict) -> PullFacts | None:
    """What a pull_request payload says (PR, head, fork or not); None for another event.
    ValueError names a part of the payload that is not the shape GitHub sends."""
    if event.get("pull_request") is None:
        return None
    pr = field_object(event, "pull_request")
    number = pr.get("number") if type(pr.get("number")) is int else None
    sha = field_object(pr, "pull_request.head").get("sha")

    def repo(side: str):
        where = f"pull_request.{side}"
        return field_object(field_object(pr, where), f"{where}.repo").get("full_name")

    head, base = repo("head"), repo("base")  # a deleted fork has none: untrusted like any fork
    return PullFacts(
        fork=head is None or head != base, pr=number, head=sha if _is_sha(sha) else None
    )


def approvals(reviews, comments, trigger: str | None = None, before: str | None = None) -> tuple:
    """Every approval in GitHub's review and comment lists made before ``before`` (an ISO time),
    whoever made it: permissions are not checked here."""
    limit = _time(before) if before else None
    found, last = [], {}
    for review in reviews:
        login, sha = _login(review), review.get("commit_id")
        at = _time(review.get("submitted_at"))
        if not login or not _is_sha(sha) or at is None or (limit and at > limit):
            continue
        if review.get("state") in SUBMITTED and (login not in last or at >= last[login][0]):
            last[login] = (at, sha, review["state"], review.get("author_association"))
    for login, (_, sha, state, association) in sorted(last.items()):
        if state == "APPROVED":
            found.append(Approval(login, sha, "review", association))
        if login == trigger:
            found.append(Approval(login, sha, "trigger", association))
    for comment in comments:
        login, body = _login(comment), comment.get("body")
        at = _time(comment.get("updated_at") or comment.get("created_at"))
        if login and isinstance(body, str) and at is not None and not (limit and at > limit):
            association = comment.get("author_association")
            found += [Approval(login, sha, "comment", association) for sha in run_ci_shas(body)]
    return tuple(found)


def run_ci_shas(body: str) -> list:
    """The commits a comment approves: each line exactly ``/run-ci SHA`` in the commenter's own
    words (``markdown.own_lines``), not in code, HTML or a quote."""
    from ci.reporter import markdown  # the report's dependency: the gate job installs it

    return [m[1] for m in map(RUN_COMMENT.fullmatch, markdown.own_lines(body)) if m]


def candidates(found, head: str | None) -> list:
    """The logins naming ``head``, most plausible writers first (author_association, then login):
    throwaway accounts cannot crowd a maintainer out before the bound."""
    rank = {}
    for approval in found:
        if head and approval.sha == head:
            a = approval.association
            where = ASSOCIATIONS.index(a) if a in ASSOCIATIONS else len(ASSOCIATIONS)
            rank[approval.login] = min(where, rank.get(approval.login, where))
    return sorted(rank, key=lambda login: (rank[login], login))


# actor: who triggered the run (the labeler, a pusher, a re-runner).
FinishedRun = namedtuple(
    "FinishedRun", "run_id head_sha conclusion html_url head_repo repo head_branch actor created_at"
)


def finished_run(event: dict) -> FinishedRun:
    """The run a ``workflow_run`` event is about; ValueError names what is missing or odd."""
    run = event.get("workflow_run")
    if not isinstance(run, dict) or run.get("event") != "pull_request":
        raise ValueError("not a workflow_run event of a pull_request run")
    actor = field_object(run, "workflow_run.triggering_actor").get("login")
    actor = actor or field_object(run, "workflow_run.actor").get("login")
    head = field_object(run, "workflow_run.head_repository").get("full_name")
    found = FinishedRun(
        run.get("id"), run.get("head_sha"), run.get("conclusion"), str(run.get("html_url") or ""),
        head_repo=head if isinstance(head, str) else None,
        repo=field_object(event, "repository").get("full_name"), head_branch=run.get("head_branch"),
        actor=actor if isinstance(actor, str) else None, created_at=run.get("created_at"),
    )  # fmt: skip
    checks = {
        "workflow_run.id": type(found.run_id) is int,
        "workflow_run.head_sha": _is_sha(found.head_sha),
        "workflow_run.conclusion": isinstance(found.conclusion, str),
        "repository.full_name": isinstance(found.repo, str) and found.repo.count("/") == 1,
        "workflow_run.head_branch": isinstance(found.head_branch, str) and found.head_branch,
        "workflow_run.created_at": isinstance(found.created_at, str),
    }
    wrong = [name for name, ok in checks.items() if not ok]
    if wrong:
        raise ValueError(f"{wrong[0]} is missing or not what GitHub sends")
    return found


def load_event(path: str) -> dict:
    """The event payload at ``path``; ValueError (OSError) when it is not a JSON object."""
    try:
        with open(path, encoding="utf-8") as handle:
            event = json.load(handle)
    except RecursionError:
        raise ValueError(f"{path}: nested deeper than the JSON parser allows") from None
    if not isinstance(event, dict):
        raise ValueError(f"{path}: event payload is not a JSON object")
    return event


def field_object(parent: dict, where: str) -> dict:
    """The object at ``where``'s last key in ``parent`` ({} for absent or null); ValueError
    naming ``where`` for anything else."""
    value = parent.get(where.rsplit(".", 1)[-1])
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} is {type(value).__name__}, not an object")
    return value


def _login(item: dict) -> str | None:
    return (item.get("user") or {}).get("login")  # null for a deleted account


def _is_sha(value) -> bool:
    return isinstance(value, str) and bool(COMMIT_SHA.fullmatch(value))


def _time(value):
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (AttributeError, TypeError, ValueError):
        return None
