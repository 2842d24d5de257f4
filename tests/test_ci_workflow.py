"""The GitHub Actions workflows as a specification of who may do what, parsed from the YAML.

Trust rules: PR code runs only in jobs that hold no write permission, no secret and no
persisted credentials; jobs with a write permission run on hosted runners, check out only the
base (or default-branch) commit and never install or run the PR's package; every action is
pinned by commit SHA; every job has a timeout; the results always reach the PR.
"""

import json
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOWS = os.path.join(ROOT, "ci", "workflows")
TEST_FLOW = "pr-test-dsv4-workspace.yml"
REPORT_FLOW = "pr-report-dsv4-workspace.yml"
DEFAULT_LABELS = {"self-hosted", "linux", "x64", "arm64", "ubuntu-latest"}


def load(name):
    with open(os.path.join(FLOWS, name)) as handle:
        return yaml.safe_load(handle)


def text(name):
    with open(os.path.join(FLOWS, name)) as handle:
        return handle.read()


def jobs():
    for name in (TEST_FLOW, REPORT_FLOW):
        for job_id, job in load(name)["jobs"].items():
            yield f"{name}:{job_id}", job


def writes(job) -> bool:
    return any(level == "write" for level in (job.get("permissions") or {}).values())


def self_hosted(job) -> bool:
    runs_on = job["runs-on"]
    return "self-hosted" in (runs_on if isinstance(runs_on, list) else [runs_on])


def checkouts(job):
    return [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]


def _test_steps():
    return load(TEST_FLOW)["jobs"]["test"]["steps"]


@pytest.mark.parametrize("name", [TEST_FLOW, REPORT_FLOW])
def test_no_permission_at_workflow_level_and_every_job_has_a_timeout(name):
    flow = load(name)
    assert flow["permissions"] == {}
    for job_id, job in flow["jobs"].items():
        assert 0 < job["timeout-minutes"] <= 120, job_id
        assert "permissions" in job, f"{job_id}: permissions must be set per job"


@pytest.mark.parametrize("name", [TEST_FLOW, REPORT_FLOW])
def test_every_action_is_pinned_by_a_full_commit_sha_with_its_version(name):
    uses = re.findall(r"^\s*(?:- )?uses:\s*(\S+)(.*)", text(name), flags=re.M)
    assert uses
    for ref, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert re.match(r"\s+# v\d", comment), f"{ref}: add a # vX.Y.Z comment"


def test_the_self_hosted_job_reads_only_and_holds_no_token_or_secret():
    hosted = [(job_id, job) for job_id, job in jobs() if self_hosted(job)]
    assert [job_id for job_id, _ in hosted] == [f"{TEST_FLOW}:test"]
    for job_id, job in hosted:
        assert job["permissions"] == {"contents": "read"}, job_id
        dumped = yaml.safe_dump(job)
        assert "secrets." not in dumped and "github.token" not in dumped
        assert "GITHUB_TOKEN" not in dumped
        for step in checkouts(job):
            assert step["with"]["persist-credentials"] is False
        # The venv and the results live outside the checkout the PR's tests can write to.
        install = next(s["run"] for s in job["steps"] if "venv" in str(s.get("run", "")))
        assert '"$RUNNER_TEMP/dsv4-venv"' in install and ".ci-venv" not in install


def test_jobs_with_write_permission_never_meet_pr_code():
    writers = [(job_id, job) for job_id, job in jobs() if writes(job)]
    assert {j for j, _ in writers} == {
        f"{TEST_FLOW}:pending",
        f"{TEST_FLOW}:report",
        f"{REPORT_FLOW}:report",
    }
    for job_id, job in writers:
        assert not self_hosted(job), job_id
        for step in checkouts(job):
            ref = (step.get("with") or {}).get("ref")
            # The base commit, or (workflow_run) this repository's default branch.
            assert ref in (None, "${{ github.event.pull_request.base.sha }}"), job_id
            assert step["with"]["persist-credentials"] is False
            assert "path" not in step["with"]
        for step in job["steps"]:
            run = step.get("run", "")
            for install in re.findall(r"pip install[^\n]*", run):
                packages = [w for w in install.split()[2:] if not w.startswith("-")]
                assert packages and all(re.fullmatch(r"[\w.-]+==[\w.]+", p) for p in packages), (
                    f"{job_id}: only pinned packages from PyPI, never the PR's ({install})"
                )
            assert "needs.gate.outputs.sha" not in str(step.get("with", {})), job_id
            assert "working-directory" not in step


def test_the_report_always_runs_so_the_slot_never_stays_pending():
    report = load(TEST_FLOW)["jobs"]["report"]
    assert report["if"].startswith("always()")
    assert set(report["needs"]) == {"gate", "pending", "test"}
    step = report["steps"][-1]
    assert step["if"] == "always()" and "--test-result" in step["run"]
    assert step["env"]["TEST_RESULT"] == "${{ needs.test.result }}"
    assert "--require-head" in step["run"] and "--check-run" in step["run"]
    (upload,) = [s for s in _test_steps() if "upload-artifact" in str(s.get("uses"))]
    assert upload["if"] == "always()" and upload["with"]["name"] == "dsv4-results"


def test_a_fork_runs_only_the_commit_the_gate_approved_reading_github_with_a_read_token():
    flow = load(TEST_FLOW)
    (checkout,) = checkouts(flow["jobs"]["test"])
    assert checkout["with"]["ref"] == "${{ needs.gate.outputs.sha }}"
    gate = flow["jobs"]["gate"]
    assert set(gate["permissions"].values()) == {"read"}
    assert gate["permissions"].keys() >= {"pull-requests", "issues"}
    step = gate["steps"][-1]
    assert "ci gate" in step["run"] and step["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert set(flow[True]["pull_request"]["types"]) == {
        "opened",
        "synchronize",
        "reopened",
        "labeled",
    }


def test_an_unrelated_label_cannot_cancel_a_gpu_run():
    flow = load(TEST_FLOW)
    group = flow["concurrency"]["group"]
    assert flow["concurrency"]["cancel-in-progress"] is True
    assert "github.event.label.name != 'run-ci'" in group and "github.run_id" in group
    assert flow["jobs"]["gate"]["if"] == (
        "github.event.action != 'labeled' || github.event.label.name == 'run-ci'"
    )


def test_the_fork_report_workflow_runs_after_the_test_workflow_from_the_default_branch():
    flow = load(REPORT_FLOW)
    assert flow[True] == {
        "workflow_run": {"workflows": [load(TEST_FLOW)["name"]], "types": ["completed"]}
    }
    job = flow["jobs"]["report"]
    assert "github.event.workflow_run.event == 'pull_request'" in job["if"]
    run = job["steps"][-1]["run"]
    assert '--workflow-run "$GITHUB_EVENT_PATH"' in run and "--post" in run
    # Nothing of the fork's run is taken on its word: no gate record, and the results artifact
    # is downloaded by the bot after its size is checked, not by an action that downloads first.
    assert "--gate" not in run and "dsv4-gate" not in text(REPORT_FLOW)
    assert not [s for s in job["steps"] if "download-artifact" in str(s.get("uses"))]


def test_the_pending_slot_is_written_only_while_the_approved_commit_is_the_head():
    step = load(TEST_FLOW)["jobs"]["pending"]["steps"][-1]
    assert '--sha "$HEAD_SHA"' in step["run"] and "--require-head" in step["run"]
    assert step["env"]["HEAD_SHA"] == "${{ needs.gate.outputs.sha }}"


def test_actionlint_config_declares_every_self_hosted_label():
    with open(os.path.join(FLOWS, "actionlint.yaml")) as handle:
        declared = set(yaml.safe_load(handle)["self-hosted-runner"]["labels"])
    for _, job in jobs():
        labels = job["runs-on"] if isinstance(job["runs-on"], list) else [job["runs-on"]]
        assert set(labels) - DEFAULT_LABELS <= declared


# --- the GPU runner: the test job starts clean and leaves nothing ------------------------------


def _container_switch(runner: str, image: str):
    """The test job's ``container:`` as the runner evaluates it for these repository variables:
    the expression, read with the two values GitHub's expression language would give it."""
    value = load(TEST_FLOW)["jobs"]["test"]["container"]
    match = re.fullmatch(
        r"\$\{\{ vars\.DSV4_CI_RUNNER != '([\w-]+)' && fromJSON\(format\('(.*)', "
        r"vars\.DSV4_CI_IMAGE\)\) \|\| '' \}\}",
        value,
    )
    assert match, value
    if runner == match[1]:
        return ""  # an empty container: the job runs on the machine itself
    return json.loads(match[2].replace("{{", "{").replace("}}", "}").replace("{0}", image))


def test_the_test_job_runs_in_a_fresh_gpu_container_unless_the_runner_is_an_ephemeral_vm():
    image = "registry.example/sglang@sha256:" + "0" * 64
    assert _container_switch("", image) == {"image": image, "options": "--gpus all"}
    assert _container_switch("ephemeral-vm", image) == ""
    job = load(TEST_FLOW)["jobs"]["test"]
    assert job["defaults"]["run"]["shell"] == "bash"
    assert job["env"]["CI_IMAGE"] == (
        "${{ vars.DSV4_CI_RUNNER != 'ephemeral-vm' && vars.DSV4_CI_IMAGE || '' }}"
    )


@pytest.mark.parametrize(
    "image, ok",
    [
        ("registry.example/sglang@sha256:" + "a" * 64, True),
        ("", True),  # an ephemeral VM: no container
        ("registry.example/sglang:v0.5.23", False),
        ("registry.example/sglang@sha256:" + "a" * 63, False),
        ("registry.example/sglang:latest@sha256:" + "A" * 64, False),
    ],
)
def test_the_job_stops_before_the_checkout_unless_its_container_is_pinned_by_digest(
    tmp_path, image, ok
):
    import subprocess

    first = _test_steps()[0]["run"]
    check = first.split("find ")[0]  # the image check, before the workspace is emptied
    env = {"PATH": os.environ["PATH"], "CI_IMAGE": image}
    proc = subprocess.run(["bash", "-c", check], env=env, capture_output=True, text=True)
    assert (proc.returncode == 0) == ok, proc.stderr


def test_no_process_the_tests_left_outlives_them_into_the_upload_step():
    steps = _test_steps()
    (stop,) = [i for i, s in enumerate(steps) if "kill -KILL -1" in str(s.get("run"))]
    ab = next(i for i, s in enumerate(steps) if s.get("id") == "ab")
    upload = next(i for i, s in enumerate(steps) if "upload-artifact" in str(s.get("uses")))
    assert ab < stop < upload
    assert steps[stop]["if"] == "always() && vars.DSV4_CI_RUNNER != 'ephemeral-vm'"


@pytest.mark.parametrize("name", [TEST_FLOW, REPORT_FLOW, "release-watch.yml"])
def test_no_workflow_restores_or_saves_an_actions_cache(name):
    for job in load(name)["jobs"].values():
        for step in job["steps"]:
            assert not str(step.get("uses", "")).startswith("actions/cache"), name
            assert "cache" not in (step.get("with") or {}), name


def test_a_pth_planted_in_the_user_site_runs_in_none_of_the_test_jobs_pythons(tmp_path):
    # Finding 1 of issue 18: a user-site .pth left by one PR ran inside the next job's
    # `python -m venv` and its python. Run the job's own venv command and the A/B step's python
    # flags, with the job's env, a HOME that holds such a .pth, and this interpreter's base.
    import subprocess
    import sys

    job = load(TEST_FLOW)["jobs"]["test"]
    home, temp = tmp_path / "home", tmp_path / "runner-temp"
    temp.mkdir()
    base = getattr(sys, "_base_executable", sys.executable)
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "RUNNER_TEMP": str(temp)}
    user_site = subprocess.run(
        [base, "-m", "site", "--user-site"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    os.makedirs(user_site)
    mark = tmp_path / "planted-code-ran"
    with open(os.path.join(user_site, "zz.pth"), "w") as handle:
        handle.write(f"import os; open({str(mark)!r}, 'w').close()\n")
    env.update({k: str(v) for k, v in job["env"].items() if k != "PYTHON"}, PYTHON=base)
    venv_step = next(s["run"] for s in job["steps"] if "-m venv" in str(s.get("run")))
    (make_venv,) = [line for line in venv_step.splitlines() if "-m venv" in line]
    ab = next(s["run"] for s in job["steps"] if s.get("id") == "ab")
    python_with_flags = ab.split(" -m ci run")[0]  # "$RUNNER_TEMP/dsv4-venv/bin/python" -s
    for command in (make_venv, f"{python_with_flags} -c pass"):
        subprocess.run(["bash", "-c", command], env=env, check=True, timeout=120)
        assert not mark.exists(), f"the planted .pth ran in: {command}"
    # The plant itself works: without the job's settings it runs.
    subprocess.run([base, "-c", "pass"], env={**env, "PYTHONNOUSERSITE": ""}, check=True)
    assert mark.exists()
