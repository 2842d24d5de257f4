"""Whether a PR's head commit may run CI on our runners, and the trusted facts of the events.

``decide`` is pure: it reads ``PullFacts`` (the PR's head, labels and writers' approvals as GitHub
has them now; ``Publisher.pull_facts`` gathers them). A branch of the base repository always runs;
a fork's head runs only when someone with write permission saw exactly that commit. A
``workflow_run`` payload is GitHub's own account of a finished run; its artifacts are not trusted.
"""

import datetime
import json
import re
from dataclasses import asdict, dataclass, field

RUN_LABEL = "run-ci"
COMMIT_SHA = re.compile(r"[0-9a-f]{40}")  # a full commit id, as GitHub sends it
RUN_COMMENT = re.compile(r"/run-ci +([0-9a-f]{40})")  # a whole line of the comment
SUBMITTED = ("APPROVED", "COMMENTED", "CHANGES_REQUESTED")  # not PENDING, not DISMISSED
WRITE = ("admin", "write")  # GitHub's ``permission`` field; maintain reads as write
# GitHub's ``author_association``, most plausible writer first: whose permission is read first.
# Not trusted on its own (a private org member can read as CONTRIBUTOR); it only orders.
ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR")


@dataclass(frozen=True)
class Approval:
    """``login`` saw commit ``sha``; ``via`` is how they said so."""

    login: str
    sha: str
    via: str  # "review" | "comment" | "trigger"
    association: str = field(default="", compare=False)  # GitHub's author_association


@dataclass(frozen=True)
class PullFacts:
    """What the decision reads; ``approvals`` holds only those of people with write permission."""

    fork: bool
    pr: int | None
    head: str | None
    labels: frozenset = frozenset()
    approvals: tuple = ()
    unchecked: int = 0  # people naming the head whose permission was not read (the bound)


@dataclass(frozen=True)
class Gate:
    run: bool
    fork: bool
    reason: str
    state: str = "run"  # run | missing-label | stale-label
    pr: int | None = None
    sha: str | None = None  # the head commit this decision is about (the one approved)

    def to_json(self) -> dict:
        data = asdict(self)
        data["head_sha"] = data.pop("sha")
        return data


_HOW = {
    "review": "an approving review of it",
    "comment": "a /run-ci comment naming it",
    "trigger": "their last review was of it",
}


def decide(facts: PullFacts) -> Gate:
    where = dict(fork=facts.fork, pr=facts.pr, sha=facts.head)
    if not facts.fork:
        return Gate(run=True, reason="branch of the base repository", **where)
    seen = [
        a
        for a in facts.approvals
        if facts.head and a.sha == facts.head and (a.via != "trigger" or RUN_LABEL in facts.labels)
    ]
    if seen:
        who = seen[0]
        reason = f"fork: {who.login} approved {facts.head[:12]} ({_HOW[who.via]})"
        return Gate(run=True, reason=reason, **where)
    if RUN_LABEL in facts.labels or facts.approvals or facts.unchecked:
        reason = f"fork: no one with write permission approved {facts.head}, the head now"
        if facts.unchecked:
            reason += f" ({facts.unchecked} more naming it were not checked: the bound)"
        return Gate(run=False, state="stale-label", reason=reason, **where)
    return Gate(run=False, state="missing-label", reason=f"fork without {RUN_LABEL!r}", **where)


def event_facts(event: dict) -> PullFacts | None:
    """What a pull_request payload says (PR, head, fork or not); None for another event. A fork's
    labels and approvals are not in it: they are read from GitHub (``Publisher.pull_facts``).
    ValueError names a part of the payload that is not the shape GitHub sends."""
    pr = event.get("pull_request")
    if pr is None:
        return None
    pr = field_object(event, "pull_request", "pull_request")
    number = pr.get("number") if type(pr.get("number")) is int else None
    sha = field_object(pr, "head", "pull_request.head").get("sha")
    head = _full_name(field_object(pr, "head", "pull_request.head"), "pull_request.head.repo")
    base = _full_name(field_object(pr, "base", "pull_request.base"), "pull_request.base.repo")
    # A deleted fork has no head repo; treat it as untrusted like any fork.
    return PullFacts(
        fork=head is None or head != base, pr=number, head=sha if _is_sha(sha) else None
    )


def approvals(reviews, comments, trigger: str | None = None, before: str | None = None) -> tuple:
    """Every approval that GitHub's review and comment lists (the API's JSON) hold, made before
    ``before`` (an ISO time: the run's start) when given; whose permission is not checked here."""
    limit = _time(before) if before else None
    found, last = [], {}
    for review in _dicts(reviews):
        login, sha = _login(review), review.get("commit_id")
        at = _time(review.get("submitted_at"))
        if not login or not _is_sha(sha) or at is None or (limit and at > limit):
            continue
        if review.get("state") in SUBMITTED and (login not in last or at >= last[login][0]):
            last[login] = (at, sha, review["state"], _association(review))
    for login, (_, sha, state, association) in sorted(last.items()):
        if state == "APPROVED":
            found.append(Approval(login, sha, "review", association))
        if login == trigger:
            found.append(Approval(login, sha, "trigger", association))
    for comment in _dicts(comments):
        login, body = _login(comment), comment.get("body")
        at = _time(comment.get("updated_at") or comment.get("created_at"))
        if login and isinstance(body, str) and at is not None and not (limit and at > limit):
            found += [
                Approval(login, sha, "comment", _association(comment)) for sha in run_ci_shas(body)
            ]
    return tuple(found)


def run_ci_shas(body: str) -> list:
    """The commits a comment approves: each line that is exactly ``/run-ci SHA`` in the
    commenter's own words (``markdown.own_lines``); in code, HTML or a quote it only shows the
    command, as in "I will NOT /run-ci this"."""
    from ci.reporter import markdown  # the report's dependency: the gate job installs it

    return [m[1] for m in map(RUN_COMMENT.fullmatch, markdown.own_lines(body)) if m]


def candidates(found, head: str | None) -> list:
    """The distinct logins naming ``head``, the most plausible writers first (by GitHub's
    author_association, then login): the order in which their permission is read, so that
    throwaway accounts cannot crowd out a maintainer before the bound."""
    rank = {}
    for approval in found:
        if head and approval.sha == head:
            where = _rank(approval.association)
            rank[approval.login] = min(where, rank.get(approval.login, where))
    return sorted(rank, key=lambda login: (rank[login], login))


def _rank(association: str) -> int:
    return ASSOCIATIONS.index(association) if association in ASSOCIATIONS else len(ASSOCIATIONS)


def _association(item: dict) -> str:
    value = item.get("author_association")
    return value if isinstance(value, str) else ""


CONCLUSIONS = (  # of a finished run
    "success failure cancelled timed_out skipped neutral action_required stale startup_failure"
).split()


@dataclass(frozen=True)
class FinishedRun:
    run_id: int
    head_sha: str
    conclusion: str
    html_url: str
    head_repo: str | None
    repo: str
    head_branch: str
    actor: str | None  # who triggered it: the labeler, a pusher, a re-runner
    created_at: str


def finished_run(event: dict) -> FinishedRun:
    """The run a ``workflow_run`` event is about; ValueError names what is missing or odd."""
    run = event.get("workflow_run")
    if not isinstance(run, dict) or run.get("event") != "pull_request":
        raise ValueError("not a workflow_run event of a pull_request run")
    actor = field_object(run, "triggering_actor", "workflow_run.triggering_actor").get("login")
    actor = actor or field_object(run, "actor", "workflow_run.actor").get("login")
    head = field_object(run, "head_repository", "workflow_run.head_repository").get("full_name")
    found = FinishedRun(
        run_id=run.get("id"),
        head_sha=run.get("head_sha"),
        conclusion=run.get("conclusion"),
        html_url=str(run.get("html_url") or ""),
        head_repo=head if isinstance(head, str) else None,
        repo=field_object(event, "repository", "repository").get("full_name"),
        head_branch=run.get("head_branch"),
        actor=actor if isinstance(actor, str) else None,
        created_at=run.get("created_at"),
    )
    checks = {
        "workflow_run.id": type(found.run_id) is int,
        "workflow_run.head_sha": _is_sha(found.head_sha),
        "workflow_run.conclusion": found.conclusion in CONCLUSIONS,
        "repository.full_name": isinstance(found.repo, str),
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


def field_object(parent: dict, key: str, where: str) -> dict:
    """``parent[key]`` where the payload has an object (an empty one for absent or null);
    ValueError naming ``where`` for anything else: a payload is checked before it is used."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} is {type(value).__name__}, not an object")
    return value


def _full_name(parent: dict, where: str):
    return field_object(parent, "repo", where).get("full_name")


def _dicts(items) -> list:
    return [item for item in items or [] if isinstance(item, dict)]


def _login(item: dict) -> str | None:
    user = item.get("user")
    login = user.get("login") if isinstance(user, dict) else None
    return login if isinstance(login, str) and login else None


def _is_sha(value) -> bool:
    return isinstance(value, str) and bool(COMMIT_SHA.fullmatch(value))


def _time(value):
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (AttributeError, TypeError, ValueError):
        return None
