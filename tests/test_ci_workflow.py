"""The GitHub Actions workflow: valid YAML, label-gated, and no token near the test processes."""

import os

import yaml

WORKFLOW = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "ci/workflows/pr-test-dsv4-workspace.yml",
)


def load():
    with open(WORKFLOW) as handle:
        return yaml.safe_load(handle)


def test_workflow_is_valid_yaml_triggered_by_pull_request_and_labels():
    flow = load()
    triggers = flow[True]  # YAML 1.1 reads the bare key `on` as a boolean
    assert set(triggers["pull_request"]["types"]) >= {"opened", "synchronize", "labeled"}
    assert flow["jobs"]["test"]["needs"] == "gate"
    assert "needs.gate.outputs.run == 'true'" in flow["jobs"]["test"]["if"]
    assert "self-hosted" in flow["jobs"]["test"]["runs-on"]


def test_only_report_steps_get_the_token_and_the_ab_run_does_not():
    steps = load()["jobs"]["test"]["steps"]
    ab = next(s for s in steps if s.get("id") == "ab")
    assert "--backend cuda" in ab["run"] and "GITHUB_TOKEN" not in str(ab)
    for step in steps:
        if "GITHUB_TOKEN" in str(step.get("env", {})):
            assert step.get("working-directory") == ".ci-base"  # the base's bot, not the PR's
