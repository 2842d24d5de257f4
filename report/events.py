"""The trusted facts of a ``workflow_run`` event, for the report workflow of fork PRs.

For reading the payload only. In a ``workflow_run`` workflow the payload is written by GitHub
about the run that finished, so its run id, head SHA, head repository and branch, workflow file,
who triggered it and when, and its conclusion can be trusted; everything inside that run's
artifacts cannot (a fork PR's workflow file is the fork's own). Which PR the run was for, and
whether its head was approved, is asked of GitHub (``report.fork_request``), never the artifact.
"""

import re
from dataclasses import dataclass

from report.gate import COMMIT_SHA

CONCLUSIONS = (
    "success",
    "failure",
    "cancelled",
    "timed_out",
    "skipped",
    "neutral",
    "action_required",
    "stale",
    "startup_failure",
)


WORKFLOW_PATH = re.compile(r"^\.github/workflows/[A-Za-z0-9_.-]{1,100}\.ya?ml$")


@dataclass(frozen=True)
class FinishedRun:
    run_id: int
    head_sha: str
    conclusion: str
    html_url: str
    head_repo: str | None
    repo: str
    path: str = ""  # the workflow file that ran
    head_branch: str = ""
    actor: str | None = None  # who triggered it: the labeler, a pusher, a re-runner
    created_at: str | None = None
    default_branch: str = "main"


def finished_run(event: dict) -> FinishedRun:
    """The run a ``workflow_run`` event is about; ValueError names what is missing or odd."""
    run = event.get("workflow_run")
    if not isinstance(run, dict):
        raise ValueError("not a workflow_run event (no workflow_run object)")
    if run.get("event") != "pull_request":
        raise ValueError(f"workflow_run.event is {run.get('event')!r}, not 'pull_request'")
    run_id, sha = run.get("id"), run.get("head_sha")
    if not isinstance(run_id, int) or isinstance(run_id, bool):
        raise ValueError("workflow_run.id is not an integer")
    if not isinstance(sha, str) or not COMMIT_SHA.match(sha):
        raise ValueError("workflow_run.head_sha is not a 40-hex commit")
    conclusion = run.get("conclusion")
    if conclusion not in CONCLUSIONS:
        raise ValueError(f"workflow_run.conclusion {conclusion!r} is not a finished run's")
    repo = (event.get("repository") or {}).get("full_name")
    if not isinstance(repo, str):
        raise ValueError("repository.full_name is missing")
    head_repo = (run.get("head_repository") or {}).get("full_name")
    path, branch = run.get("path"), run.get("head_branch")
    if not isinstance(path, str) or not WORKFLOW_PATH.match(path):
        raise ValueError(f"workflow_run.path {str(path)[:80]!r} is not a workflow file")
    if not isinstance(branch, str) or not branch:
        raise ValueError("workflow_run.head_branch is missing")
    actor = (run.get("triggering_actor") or run.get("actor") or {}).get("login")
    if not isinstance(run.get("created_at"), str):
        raise ValueError("workflow_run.created_at is missing")
    default = (event.get("repository") or {}).get("default_branch")
    return FinishedRun(
        run_id=run_id,
        head_sha=sha,
        conclusion=conclusion,
        html_url=str(run.get("html_url") or ""),
        head_repo=head_repo if isinstance(head_repo, str) else None,
        repo=repo,
        path=path,
        head_branch=branch,
        actor=actor if isinstance(actor, str) else None,
        created_at=run["created_at"],
        default_branch=default if isinstance(default, str) and default else "main",
    )


def slot_state(conclusion: str) -> str:
    """The slot state for a run that left no results behind."""
    return "cancelled" if conclusion in ("cancelled", "skipped") else "failure"
