"""Who may do what in the workflows: PR code runs only where no token is held."""

import re
from pathlib import Path

import pytest
import yaml

FLOWS = Path(__file__).resolve().parents[1] / "ci" / "workflows"
# Each pull-request workflow and the jobs of it that run PR code.
PR_CODE_JOBS = {
    "pr-test-dsv4-workspace.yml": ["test"],
    "pr-report-dsv4-workspace.yml": [],
    "sglang-pr-ab.yml": ["test"],
    "sglang-pr-ab-report.yml": [],
}
# The refs a checkout of PR code names (a pull_request run's checkout without one: its merge).
PR_REFS = ("needs.gate.outputs.sha", "pull_request.head", "head_ref", "workflow_run.head")


def _checks_out_pr_code(flow: dict, step: dict) -> bool:
    if not str(step.get("uses", "")).startswith("actions/checkout@"):
        return False
    given = step.get("with") or {}
    if "repository" in given:  # the bot, at its pinned commit
        return False
    ref = given.get("ref")
    triggers = flow[True]  # YAML 1.1 reads the key `on` as True
    return any(r in str(ref) for r in PR_REFS) or (ref is None and "pull_request" in triggers)


@pytest.mark.parametrize("name", sorted(PR_CODE_JOBS))
def test_pr_code_runs_only_where_no_token_or_write_permission_is(name):
    flow = yaml.safe_load((FLOWS / name).read_text())
    runs_pr_code = []
    for job_id, job in flow["jobs"].items():
        dumped = yaml.safe_dump(job)
        writes = "write" in (job.get("permissions") or {}).values()
        powerful = writes or "github.token" in dumped or "secrets." in dumped
        steps = job["steps"]
        for step in steps:
            if "actions/checkout@" in str(step.get("uses")):
                assert step["with"]["persist-credentials"] is False, job_id
        if not any(_checks_out_pr_code(flow, step) for step in steps):
            assert job["runs-on"] == "ubuntu-latest", f"{job_id}: a hosted runner"
            for install in re.findall(r"pip install[^\n]*", dumped):
                packages = [w for w in install.split()[2:] if not w.startswith("-")]
                assert all(re.fullmatch(r"[\w.-]+==[\w.]+", p) for p in packages), (
                    f"{job_id}: only pinned packages from PyPI, never the PR's ({install})"
                )
            continue
        runs_pr_code.append(job_id)
        assert not powerful and job["permissions"] == {"contents": "read"}, job_id
        if "container" not in job:
            continue
        # In a job container what the tests left dies before the upload (its token is readable).
        ab = next(i for i, s in enumerate(steps) if s.get("id") == "ab")
        kill = next(i for i, s in enumerate(steps) if "kill -KILL -1" in str(s.get("run")))
        upload = next(i for i, s in enumerate(steps) if "upload-artifact" in str(s.get("uses")))
        assert ab < kill < upload and steps[kill]["if"].startswith("always() && vars."), job_id
    assert runs_pr_code == PR_CODE_JOBS[name]
