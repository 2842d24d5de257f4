"""The drop-in workflow for sglang's repository (ci/workflows/sglang-pr-ab.yml): who may do what,
read from the YAML, and a rehearsal of a pull request end to end.

The rehearsal plays the workflow as Actions would, job by job and step by step: every ``run:``
step is the workflow's own text run by bash with the environment the workflow gives it (its
``${{ }}`` expressions answered from a small table; an expression the table lacks fails the
test), ``GITHUB_ENV`` and ``GITHUB_OUTPUT`` carried as Actions carries them, and each ``uses:``
step done by its local equivalent (a checkout is a clone at the ref, an artifact a copied
folder). The repository is ``sglang_layout``'s (sglang 0.5.23, a PR branch with the fix), the
GitHub is the fake on loopback. Two deviations: BACKEND is cpu (this machine has no GPU), and
nothing is preloaded (the variable's answer: each side's torch and sglang would cost 10 s of
CPU; tests/test_ci_preload.py covers --preload).
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_layout
import yaml
from ci_fake_github import FakeGitHub
from conftest import REPO, clean_env

from report import pr_states

FLOW = REPO / "ci/workflows/sglang-pr-ab.yml"
TOKEN = "ghs_rehearsal_token"
PR = 7


def load():
    return yaml.safe_load(FLOW.read_text())


def test_only_the_test_jobs_meet_pr_code_and_they_hold_no_token():
    jobs = load()["jobs"]
    test = jobs["test"]
    assert test["permissions"] == {"contents": "read"}
    dumped = yaml.safe_dump(test)
    assert "github.token" not in dumped and "secrets." not in dumped
    for job_id in ("gate", "report"):
        for step in jobs[job_id]["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                # The bot at its pinned commit; never the PR's head or merge commit.
                assert step["with"]["ref"] == "${{ vars.SGLANG_OVERLAY_REF }}", job_id
                assert step["with"]["persist-credentials"] is False
    for step in test["steps"]:
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False


def test_the_matrix_has_one_job_per_shard_and_every_action_is_pinned():
    flow = load()
    shards = int(flow["env"]["SHARDS"])
    assert flow["jobs"]["test"]["strategy"]["matrix"]["shard"] == list(range(shards))
    for ref in re.findall(r"^\s*(?:- )?uses:\s*(\S+)", FLOW.read_text(), flags=re.M):
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
    assert flow["jobs"]["report"]["needs"] == ["gate", "test"]
    assert flow["jobs"]["report"]["if"].startswith("always()")


# --- the rehearsal -----------------------------------------------------------------------------


class Rehearsal:
    """One workflow run, played locally; ``expressions`` answers the ``${{ }}`` it uses."""

    def __init__(self, tmp, fake, repo, base, head):
        self.tmp, self.fake, self.repo = tmp, fake, repo
        self.artifacts = tmp / "artifacts"
        self.artifacts.mkdir()
        bot_ref = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        self.expressions = {
            "github.event.pull_request.number": str(PR),
            "github.server_url": "https://github.invalid",
            "github.repository": "sgl/sglang",
            "github.run_id": "456",
            "github.token": TOKEN,
            "github.event.pull_request.base.sha": base,
            "vars.SGLANG_OVERLAY_REPOSITORY": "sgl/sglang-overlay",
            "vars.SGLANG_OVERLAY_REF": bot_ref,
            "vars.SGLANG_OVERLAY_PYTHON || 'python3'": sys.executable,
            # No preload here: importing torch and sglang costs each side 10 s of CPU.
            "vars.SGLANG_OVERLAY_PRELOAD || 'torch'": "",
            "github.server_url != 'https://github.com' && github.server_url || ''": fake.url,
        }
        self.head = head
        self.flow = load()

    def value(self, text, extra):
        def answer(match):
            expression = match[1].strip()
            table = {**self.expressions, **extra}
            assert expression in table, f"the rehearsal cannot answer ${{{{ {expression} }}}}"
            return table[expression]

        return re.sub(r"\$\{\{(.*?)\}\}", answer, str(text))

    def job(self, job_id, extra=None) -> tuple[str, dict, str]:
        """Run one job; its result (success or failure), its outputs and its step summary."""
        extra = dict(extra or {})
        job = self.flow["jobs"][job_id]
        folder = self.tmp / f"{job_id}-{extra.get('matrix.shard', '')}"
        workspace, temp = folder / "workspace", folder / "runner-temp"
        workspace.mkdir(parents=True)
        temp.mkdir()
        extra["runner.temp"] = str(temp)
        files = {name: folder / name for name in ("env", "output", "summary")}
        for path in files.values():
            path.touch()
        env = clean_env(
            PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
            GITHUB_WORKSPACE=str(workspace),
            RUNNER_TEMP=str(temp),
            GITHUB_ENV=str(files["env"]),
            GITHUB_OUTPUT=str(files["output"]),
            GITHUB_STEP_SUMMARY=str(files["summary"]),
            GITHUB_EVENT_PATH=str(self.tmp / "event.json"),
            GITHUB_REPOSITORY="sgl/sglang",
            GITHUB_RUN_ID="456",
        )
        env.pop("GITHUB_TOKEN", None)
        for scope in (self.flow["env"], job.get("env", {})):
            env.update({k: self.value(v, extra) for k, v in scope.items()})
        env["BACKEND"] = "cpu"  # the first deviation: no GPU here
        outcomes, result = {}, "success"
        for step in job["steps"]:
            condition = step.get("if")
            if condition == "steps.ab.outcome == 'failure'":
                if outcomes.get("ab") != "failure":
                    continue
            elif condition not in (None, "always()"):
                raise AssertionError(f"the rehearsal cannot evaluate if: {condition}")
            carried = dict(line.split("=", 1) for line in files["env"].read_text().splitlines())
            step_env = {**env, **carried}
            step_env.update({k: self.value(v, extra) for k, v in step.get("env", {}).items()})
            if "uses" in step:
                ok = self.action(step, extra, workspace)
            else:
                proc = subprocess.run(
                    ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                    cwd=workspace,
                    env=step_env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                self.log = getattr(self, "log", "") + proc.stdout + proc.stderr
                ok = proc.returncode == 0
            if "id" in step:
                outcomes[step["id"]] = "success" if ok else "failure"
            if not ok and not step.get("continue-on-error"):
                result = "failure"
                break
        outputs = dict(
            line.split("=", 1) for line in files["output"].read_text().splitlines() if "=" in line
        )
        return result, outputs, files["summary"].read_text()

    def action(self, step, extra, workspace) -> bool:
        uses, given = step["uses"].split("@")[0], step.get("with", {})
        given = {k: self.value(v, extra) for k, v in given.items()}
        if uses == "actions/checkout":
            if given.get("repository") == "sgl/sglang-overlay":
                # The bot: this checkout's files (copied: the test job empties its workspace).
                ignore = shutil.ignore_patterns(".git", ".cache", ".venv", "__pycache__")
                target = workspace / given.get("path", "")
                shutil.copytree(REPO, target, ignore=ignore, dirs_exist_ok=True)
                return True
            target = workspace / given.get("path", "")
            subprocess.run(["git", "clone", "-q", str(self.repo), str(target)], check=True)
            subprocess.run(["git", "checkout", "-q", "--detach", given["ref"]], cwd=target)
            return True
        if uses == "actions/setup-python":
            return True  # this venv's Python is first on PATH
        if uses == "actions/upload-artifact":
            source = Path(given["path"])
            if any(source.glob("*")):
                shutil.copytree(source, self.artifacts / given["name"])
            return True
        if uses == "actions/download-artifact":
            pattern = given["pattern"]
            target = Path(given["path"])
            for found in self.artifacts.glob(pattern):
                shutil.copytree(found, target / found.name)
            return True
        raise AssertionError(f"the rehearsal has no local equivalent of {uses}")


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return sglang_layout.make_repo(tmp_path_factory.mktemp("layout") / "sglang")


def rehearse(tmp, repo, branch, fork=None):
    """A PR from ``branch`` onto main (``fork``: OWNER/NAME of the fork it comes from, approved by
    a maintainer's review of its head), played through gate, every shard and the report."""
    base, head = git(repo, "rev-parse", "main"), git(repo, "rev-parse", branch)
    event = {
        "action": "opened",
        "sender": {"login": "contributor"},
        "repository": {"full_name": "sgl/sglang"},
        "pull_request": {
            "number": PR,
            "head": {"sha": head, "repo": {"full_name": fork or "sgl/sglang"}},
            "base": {"sha": base, "repo": {"full_name": "sgl/sglang"}},
            "labels": [],
        },
    }
    (tmp / "event.json").write_text(json.dumps(event))
    fake = FakeGitHub(token=TOKEN, owner="sgl", repo="sglang").start()
    try:
        fake.add_pr(PR, "Adds a regression test.", head_sha=head, fork=fork)
        if fork:
            fake.permissions["maint"] = "write"
            fake.add_review(PR, "maint", head)
        play = Rehearsal(tmp, fake, repo, base, head)
        gate, outputs, _ = play.job("gate")
        assert gate == "success", play.log
        needs = {f"needs.gate.outputs.{k}": v for k, v in outputs.items()}
        shards = [
            play.job("test", {**needs, "matrix.shard": str(shard)})[0]
            for shard in play.flow["jobs"]["test"]["strategy"]["matrix"]["shard"]
        ]
        test_result = "success" if set(shards) == {"success"} else "failure"
        report, _, summary = play.job("report", {**needs, "needs.test.result": test_result})
        return {
            "fake": fake,
            "gate": outputs,
            "shards": shards,
            "report": report,
            "summary": summary,
            "head": head,
            "play": play,
        }
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def rehearsed(layout, tmp_path_factory):
    return rehearse(tmp_path_factory.mktemp("fix"), layout, "fix")


def test_the_gate_lets_a_same_repo_head_run(rehearsed):
    gate = rehearsed["gate"]
    assert (gate["run"], gate["fork"], gate["sha"]) == ("true", "false", rehearsed["head"])


def test_every_shard_ran_and_the_pr_got_one_report_with_both_shards_cases(rehearsed):
    fake, play = rehearsed["fake"], rehearsed["play"]
    assert rehearsed["shards"] == ["success", "success"], play.log
    assert rehearsed["report"] == "success", play.log
    assert sorted(p.name for p in play.artifacts.iterdir()) == ["ab-results-0", "ab-results-1"]
    slot = pr_states.get_slot(fake.bodies[PR], "ab")
    assert slot.startswith(":white_check_mark:"), slot
    (comment,) = fake.comments.values()
    assert "TestReserveSource.test\\_replacement" in comment["body"]
    assert "TestLayout.test\\_modified" in comment["body"]
    assert [(s["context"], s["state"]) for s in fake.statuses] == [
        ("ab/base-a-test-cpu", "success")
    ]
    (check,) = fake.check_runs.values()
    assert check["conclusion"] == "success"


def test_a_head_that_fails_its_own_test_fails_its_shard_and_the_report_says_so(
    layout, tmp_path_factory
):
    played = rehearse(tmp_path_factory.mktemp("no-fix"), layout, "tests-only")
    fake, play = played["fake"], played["play"]
    # The added test (est 1 s) is shard 1's; the modified one (2 s) shard 0's.
    assert played["shards"] == ["success", "failure"], play.log
    assert played["report"] == "success", play.log
    assert pr_states.get_slot(fake.bodies[PR], "ab").startswith(":x:")
    assert [(s["context"], s["state"]) for s in fake.statuses] == [
        ("ab/base-a-test-cpu", "failure")
    ]
    (check,) = fake.check_runs.values()
    assert check["conclusion"] == "failure"


def test_an_approved_fork_runs_and_gets_its_report_in_the_job_summary_only(
    layout, tmp_path_factory
):
    played = rehearse(tmp_path_factory.mktemp("fork"), layout, "fix", fork="someone/sglang")
    fake, play = played["fake"], played["play"]
    assert played["gate"]["fork"] == "true" and played["gate"]["run"] == "true", play.log
    assert played["shards"] == ["success", "success"] and played["report"] == "success", play.log
    assert "TestReserveSource.test\\_replacement" in played["summary"]
    assert fake.bodies[PR] == "Adds a regression test." and not fake.comments
    assert not fake.statuses and not fake.check_runs
    assert not [m for m, _ in fake.requests if m != "GET"]
