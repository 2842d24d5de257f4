"""The trusted facts of a ``workflow_run`` event, for the report workflow of fork PRs.

For reading the payload only. In a ``workflow_run`` workflow the payload is written by GitHub
about the run that finished, so its run id, head SHA, head repository and conclusion can be
trusted; everything inside that run's artifacts cannot (a fork PR's workflow file is the
fork's own). Which PR the run was for is therefore taken from the artifact and then checked
against GitHub (the PR's head must be this head SHA) before anything is posted.
"""

from dataclasses import dataclass

from ci.gate import COMMIT_SHA

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


@dataclass(frozen=True)
class FinishedRun:
    run_id: int
    head_sha: str
    conclusion: str
    html_url: str
    head_repo: str | None
    repo: str


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
    return FinishedRun(
        run_id=run_id,
        head_sha=sha,
        conclusion=conclusion,
        html_url=str(run.get("html_url") or ""),
        head_repo=head_repo if isinstance(head_repo, str) else None,
        repo=repo,
    )


def slot_state(conclusion: str) -> str:
    """The slot state for a run that left no results behind."""
    return "cancelled" if conclusion in ("cancelled", "skipped") else "failure"
