"""Every request the bot sends is an operation of GitHub's REST description."""

import json
import os
import re
from dataclasses import replace

import ci_samples
import pytest
from ci_samples import HEAD, PR, model, report, results_folder, workflow_run
from test_ci_fork_report import _fork_pr

from ci.__main__ import main
from ci.reporter import render

SPEC = os.environ.get("OCTOKIT_OPENAPI")
fake = pytest.fixture(ci_samples.pr_fake, name="fake")
pytestmark = pytest.mark.skipif(
    not (SPEC and os.path.exists(SPEC)), reason="OCTOKIT_OPENAPI (octokit's description) not set"
)


def _operations(spec):
    ops = []
    for template, item in spec["paths"].items():
        # {path} (a file in the contents API) spans folders; every other parameter is one segment.
        pattern = re.escape(template).replace(r"\{path\}", ".+")
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)
        for method, op in item.items():
            if method in ("get", "post", "patch", "put", "delete"):
                ops.append((method.upper(), re.compile(f"^{pattern}$"), template, op))
    return ops


def test_every_request_of_every_report_path_is_in_githubs_description(fake, tmp_path, monkeypatch):
    jsonschema = pytest.importorskip("jsonschema")
    with open(SPEC) as handle:
        ops = _operations(json.load(handle))
    m = model()
    m = replace(m, cases=[replace(m.cases[0], line=40), *m.cases[1:]])
    folder = str(results_folder(tmp_path / "r", m))
    assert report(fake, monkeypatch, *PR, "--state", "pending", "--post") == 0
    assert report(fake, monkeypatch, *PR, "--results", folder, "--sha", HEAD, "--check-run",
                  "--post") == 0  # fmt: skip
    assert report(fake, monkeypatch, *PR, "--results", "none", "--test-result", "cancelled",
                  "--sha", HEAD, "--require-head", "--check-run", "--post") == 0  # fmt: skip
    _fork_pr(fake)  # PR 7 again, now a fork's, approved, with its artifact
    assert (
        report(fake, monkeypatch, "--workflow-run", workflow_run(tmp_path / "event.json"), "--post")
        == 0
    )
    path = tmp_path / "gate-event.json"
    path.write_text(json.dumps(ci_samples.pull_request(HEAD)))
    assert main(["gate", "--event", str(path), "--api-url", fake.url]) == 0
    # Annotations 51 and on go out as check-run updates (PATCH); storage is not the API.
    many = replace(m, cases=[m.cases[0]] * 60)
    check = render.check_run(many, HEAD, "summary", "2026-01-01T00:00:00Z")
    ci_samples.publisher(fake).create_check_run(**check)
    sent, writes = list(fake.requests), list(fake.bodies_sent)
    sent = [(method, path) for method, path in sent if path.startswith("/api/v3/")]
    templates = {_operation(ops, method, path)[2] for method, path in sent}
    for method, path, body in writes:
        schema = _schema(ops, method, path)
        if schema is not None:
            jsonschema.validate(body, schema)
    used = "check-runs check-runs/{check_run_id} collaborators/{username}/permission"
    used += " pulls/{pull_number}/reviews actions/runs/{run_id}/artifacts"
    used += " actions/artifacts/{artifact_id}/{archive_format}"
    assert {"/repos/{owner}/{repo}/" + t for t in used.split()} <= templates
    with pytest.raises(jsonschema.ValidationError):  # the check itself can fail
        bad = dict(check["create"], conclusion="passed")
        jsonschema.validate(bad, _schema(ops, "POST", "/repos/o/r/check-runs"))
    assert len(writes) >= 8


def _operation(ops, method, path):
    path = path.split("?")[0].removeprefix("/api/v3")
    found = [op for op in ops if op[0] == method and op[1].match(path)]
    assert found, f"{method} {path} is not an operation of GitHub's REST API"
    return found[0]


def _schema(ops, method, path):
    content = _operation(ops, method, path)[3].get("requestBody", {}).get("content", {})
    return content.get("application/json", {}).get("schema")
