"""Decide from a GitHub event payload whether this PR may run CI on our runners.

For the decision only: a pull request from a fork runs PR code on a self-hosted GPU machine, so
it needs a maintainer's ``run-ci`` label first. It reads the payload GitHub writes to
GITHUB_EVENT_PATH and never calls the API.
"""

import json
from dataclasses import dataclass

RUN_LABEL = "run-ci"


@dataclass(frozen=True)
class Gate:
    run: bool
    fork: bool
    reason: str


def decide(event: dict, label: str = RUN_LABEL) -> Gate:
    pr = event.get("pull_request")
    if not isinstance(pr, dict):
        return Gate(run=True, fork=False, reason="not a pull_request event")
    head = ((pr.get("head") or {}).get("repo") or {}).get("full_name")
    base = ((pr.get("base") or {}).get("repo") or {}).get("full_name")
    # A deleted fork has no head repo; treat it as untrusted like any fork.
    fork = head is None or head != base
    labels = {item.get("name") for item in pr.get("labels") or [] if isinstance(item, dict)}
    if not fork:
        return Gate(run=True, fork=False, reason="branch of the base repository")
    if label in labels:
        return Gate(run=True, fork=True, reason=f"fork with the {label!r} label")
    return Gate(run=False, fork=True, reason=f"fork without the {label!r} label")


def load_event(path: str) -> dict:
    with open(path) as handle:
        event = json.load(handle)
    if not isinstance(event, dict):
        raise ValueError(f"{path}: event payload is not a JSON object")
    return event
