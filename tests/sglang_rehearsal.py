"""The drop-in workflows played job by job: ``run:`` steps by bash, ``uses:`` locally."""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from ci_fake_github import FakeGitHub, zipped
from ci_samples import fork_pr, pull_request, workflow_run
from conftest import REPO, clean_env

FLOW = REPO / "ci/workflows/sglang-pr-ab.yml"
REPORT_FLOW = REPO / "ci/workflows/sglang-pr-ab-report.yml"
TOKEN = "ghs_rehearsal_token"  # an installation token, as the Actions GITHUB_TOKEN is
PR, RUN_ID, FORK_BRANCH = 7, 456, "fix-workspace"


def load(path=FLOW):
    return yaml.safe_load(Path(path).read_text())


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True).stdout.strip()


def new_fake():
    return FakeGitHub(token=TOKEN, owner="sgl", repo="sglang", bot="github-actions[bot]")


def zip_folder(folder: Path) -> bytes:
    """The folder's files at the zip's top, as upload-artifact stores a folder."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return zipped({p.relative_to(folder).as_posix(): p.read_bytes() for p in files})


def installed(command: str) -> bool:
    """Whether ``command`` pip-installs only NAME==VERSION pins this venv holds."""
    pins = re.fullmatch(r"python -m pip install -q((?: [\w.-]+==[\w.]+)+)", command.strip())
    pairs = [p.split("==") for p in pins[1].split()] if pins else []
    return bool(pins) and all(importlib.metadata.version(n) == v for n, v in pairs)


class Rehearsal:
    """Jobs of one workflow run, played locally."""

    def __init__(self, tmp, fake, repo, base, head):
        self.tmp, self.fake, self.repo, self.log = tmp, fake, repo, ""
        self.artifacts = tmp / "artifacts"
        self.artifacts.mkdir(exist_ok=True)
        self.expressions = {
            "github.event.pull_request.number": str(PR),
            "github.server_url": "https://github.invalid",
            "github.repository": "sgl/sglang",
            "github.run_id": str(RUN_ID),
            "github.token": TOKEN,
            "github.event.pull_request.base.sha": base,
            "github.event.workflow_run.head_sha": head,
            "vars.SGLANG_AB_SHARDS": "2",
            "vars.SGLANG_AB_RUNNER": '["self-hosted", "linux", "gpu"]',
            "vars.SGLANG_AB_IMAGE": "none",
            "vars.SGLANG_OVERLAY_REPOSITORY": "sgl/sglang-overlay",
            "vars.SGLANG_OVERLAY_REF": git(REPO, "rev-parse", "HEAD"),
            "vars.SGLANG_OVERLAY_PYTHON || 'python3'": sys.executable,
            "vars.SGLANG_OVERLAY_PRELOAD || 'torch'": "",  # importing torch: 10 CPU-s a side
            "github.server_url != 'https://github.com' && github.server_url || ''": fake.url,
        }
        self.flow = load()

    def value(self, text, extra):
        table = {**self.expressions, **extra}

        def answer(match):
            expression = match[1].strip()
            assert expression in table, f"the rehearsal cannot answer ${{{{ {expression} }}}}"
            return table[expression]

        return re.sub(r"\$\{\{(.*?)\}\}", answer, str(text))

    def job(self, job_id, extra=None, flow=None, event="event.json") -> tuple[str, dict, str]:
        """Job ``job_id`` of ``flow`` on the payload ``event``: its result, outputs and summary."""
        flow = flow or self.flow
        job = flow["jobs"][job_id]
        folder = self.tmp / f"{flow['name'][:12]}-{job_id}-{(extra or {}).get('matrix.shard')}"
        workspace, temp = folder / "workspace", folder / "runner-temp"
        workspace.mkdir(parents=True)
        temp.mkdir()
        extra = {**(extra or {}), "runner.temp": str(temp)}
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
            GITHUB_EVENT_PATH=str(self.tmp / event),
            GITHUB_REPOSITORY="sgl/sglang",
            GITHUB_API_URL=f"{self.fake.url}/api/v3",
            GITHUB_RUN_ID=str(RUN_ID),
        )
        env.pop("GITHUB_TOKEN", None)
        for scope in (flow.get("env", {}), job.get("env", {})):
            env.update({k: self.value(v, extra) for k, v in scope.items()})
        env.update(BACKEND="cpu", CI_REPORT_SETTLE_S="0")  # no GPU; one writer, no race
        outcomes, result = {}, "success"
        for step in job["steps"]:
            condition = step.get("if")
            if condition == "steps.ab.outcome == 'failure'":
                if outcomes.get("ab") != "failure":
                    continue
            elif condition == "always() && vars.SGLANG_AB_IMAGE != 'none'":
                continue  # no job container here
            elif condition not in (None, "always()"):
                raise AssertionError(f"the rehearsal cannot evaluate if: {condition}")
            assert "kill -KILL -1" not in step.get("run", ""), "never on this machine"
            carried = dict(line.split("=", 1) for line in files["env"].read_text().splitlines())
            step_env = {**env, **carried}
            step_env.update({k: self.value(v, extra) for k, v in step.get("env", {}).items()})
            if "uses" in step:
                ok = self.action(step, extra, workspace)
            elif step.get("id") == "install":
                venv = temp / "ab-venv" / "bin"
                venv.mkdir(parents=True)
                (venv / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
                (venv / "python").chmod(0o755)
                ok = True
            elif installed(step["run"]):
                ok = True
            else:
                command = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]]
                proc = subprocess.run(
                    command, cwd=workspace, env=step_env, capture_output=True, text=True
                )
                self.log += proc.stdout + proc.stderr
                ok = proc.returncode == 0
            if "id" in step:
                outcomes[step["id"]] = "success" if ok else "failure"
            if not ok and not step.get("continue-on-error"):
                result = "failure"
                break
        lines = files["output"].read_text().splitlines()
        outputs = dict(line.split("=", 1) for line in lines if "=" in line)
        return result, outputs, files["summary"].read_text()

    def action(self, step, extra, workspace) -> bool:
        uses = step["uses"].split("@")[0]
        given = {k: self.value(v, extra) for k, v in step.get("with", {}).items()}
        target = workspace / given.get("path", "")
        if uses == "actions/checkout" and given.get("repository") == "sgl/sglang-overlay":
            ignore = shutil.ignore_patterns(".git", ".cache", ".venv", "__pycache__")
            shutil.copytree(REPO, target, ignore=ignore, dirs_exist_ok=True)  # the bot
        elif uses == "actions/checkout":
            subprocess.run(["git", "clone", "-q", str(self.repo), str(target)], check=True)
            subprocess.run(["git", "checkout", "-q", "--detach", given["ref"]], cwd=target)
        elif uses == "actions/upload-artifact":
            source = Path(given["path"])
            if any(source.glob("*")):
                shutil.copytree(source, self.artifacts / given["name"])
                self.fake.serve_artifact(RUN_ID, given["name"], zip_folder(source))
        elif uses == "actions/download-artifact":
            for found in self.artifacts.glob(given["pattern"]):
                shutil.copytree(found, Path(given["path"]) / found.name)
        elif uses != "actions/setup-python":  # this venv's Python is first on PATH
            raise AssertionError(f"the rehearsal has no local equivalent of {uses}")
        return True


def report_fork_run(tmp, fake, repo, base, head, conclusion, fork):
    """The report workflow's job on the completed fork run RUN_ID: (result, summary, play)."""
    event = workflow_run(
        tmp / "workflow_run.json", id=RUN_ID, name=load()["name"], head_sha=head,
        head_branch=FORK_BRANCH, head_repository={"full_name": fork}, conclusion=conclusion,
        path=".github/workflows/sglang-pr-ab.yml", triggering_actor={"login": "contributor"},
        html_url=f"https://github.invalid/sgl/sglang/actions/runs/{RUN_ID}",
    )  # fmt: skip
    play = Rehearsal(tmp, fake, repo, base, head)
    result, _, summary = play.job("report", flow=load(REPORT_FLOW), event=event)
    return result, summary, play


def rehearse(tmp, repo, branch, fork=None) -> dict:
    """A PR from ``branch`` (``fork``: OWNER/NAME) through gate, shards, report, fork report."""
    base, head = git(repo, "rev-parse", "main"), git(repo, "rev-parse", branch)
    event = pull_request(head, "opened", "contributor", fork, labels=(), base=base)
    (tmp / "event.json").write_text(json.dumps(event))
    fake = new_fake().start()
    # GitHub's contents API serves the head's list of regressions (each report job reads it).
    path = load()["env"]["REGRESSIONS"]
    listed = subprocess.run(["git", "show", f"{head}:{path}"], cwd=repo, capture_output=True)
    for _ in range(2 if fork else 1) if listed.returncode == 0 else ():
        route = f"/contents/{re.escape(path)}\\?ref={head}$"
        fake.faults.append(("GET", route, 200, listed.stdout, {}))
    try:
        if fork:
            fork_pr(fake, head, fork, FORK_BRANCH)
        else:
            fake.add_pr(PR, "Adds a regression test.", head_sha=head)
        fake.read_only = bool(fork)
        play = Rehearsal(tmp, fake, repo, base, head)
        gate, outputs, _ = play.job("gate")
        assert gate == "success", play.log
        needs = {f"needs.gate.outputs.{k}": v for k, v in outputs.items()}
        matrix = play.flow["jobs"]["test"]["strategy"]["matrix"]["shard"]
        assert matrix == "${{ fromJSON(needs.gate.outputs.shards) }}", matrix
        shards = [
            play.job("test", {**needs, "matrix.shard": str(shard)})[0]
            for shard in json.loads(outputs["shards"])
        ]
        test_result = "success" if set(shards) == {"success"} else "failure"
        report, _, summary = play.job("report", {**needs, "needs.test.result": test_result})
        played = {"fake": fake, "gate": outputs, "shards": shards, "report": report}
        played.update(summary=summary, head=head, play=play)
        played["pr_run_writes"] = [(m, p) for m, p in fake.requests if m != "GET"]
        if fork:
            fake.read_only = False
            conclusion = "success" if report == test_result == "success" else "failure"
            result, summary, report_play = report_fork_run(
                tmp, fake, repo, base, head, conclusion, fork
            )
            played.update(fork_report=result, fork_summary=summary, report_play=report_play)
        return played
    finally:
        fake.stop()
