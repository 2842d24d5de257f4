"""Decide from a GitHub event payload whether this PR may run CI on our runners.

For the decision only: a pull request from a fork runs PR code on a self-hosted GPU machine, so
a maintainer approves it by adding the ``run-ci`` label, and that approves exactly one commit:
the head SHA in the ``labeled`` event. Any other event of a fork PR (a push, a reopen) runs
nothing, even while the label is still on the PR; the maintainer re-adds it to approve the new
head. It reads the payload GitHub writes to GITHUB_EVENT_PATH and never calls the API.
"""

import json
import re
from dataclasses import dataclass

RUN_LABEL = "run-ci"
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")  # a full commit id, as GitHub sends it


@dataclass(frozen=True)
class Gate:
    run: bool
    fork: bool
    reason: str
    state: str = "run"  # run | missing-label | stale-label
    pr: int | None = None
    sha: str | None = None  # the head commit this decision is about (the one approved)

    def to_json(self) -> dict:
        return {
            "run": self.run,
            "fork": self.fork,
            "reason": self.reason,
            "state": self.state,
            "pr": self.pr,
            "head_sha": self.sha,
        }


def decide(event: dict, label: str = RUN_LABEL) -> Gate:
    pr = event.get("pull_request")
    if not isinstance(pr, dict):
        return Gate(run=True, fork=False, reason="not a pull_request event")
    number = pr.get("number") if isinstance(pr.get("number"), int) else None
    sha = (pr.get("head") or {}).get("sha")
    sha = sha if isinstance(sha, str) and COMMIT_SHA.match(sha) else None
    head = ((pr.get("head") or {}).get("repo") or {}).get("full_name")
    base = ((pr.get("base") or {}).get("repo") or {}).get("full_name")
    # A deleted fork has no head repo; treat it as untrusted like any fork.
    fork = head is None or head != base
    facts = dict(fork=fork, pr=number, sha=sha)
    if not fork:
        return Gate(run=True, reason="branch of the base repository", **facts)
    added = (event.get("label") or {}).get("name")
    if event.get("action") == "labeled" and added == label and sha:
        return Gate(run=True, reason=f"fork: {label!r} added at {sha[:12]} (approves it)", **facts)
    labels = {item.get("name") for item in pr.get("labels") or [] if isinstance(item, dict)}
    if label in labels:
        return Gate(
            run=False,
            state="stale-label",
            reason=f"fork: {label!r} approved an earlier commit; re-add it to approve {sha}",
            **facts,
        )
    return Gate(
        run=False, state="missing-label", reason=f"fork without the {label!r} label", **facts
    )


def load_event(path: str) -> dict:
    with open(path) as handle:
        event = json.load(handle)
    if not isinstance(event, dict):
        raise ValueError(f"{path}: event payload is not a JSON object")
    return event
