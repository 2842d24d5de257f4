"""A rehearsal of the drop-in workflows for sglang's repository (ci/workflows/sglang-pr-ab.yml and,
for fork PRs, sglang-pr-ab-report.yml), played as Actions would play them, job by job and step by
step: every ``run:`` step is the workflow's own text run by bash with the environment the
workflow gives it (its ``${{ }}`` expressions answered from a small table; an expression the
table lacks fails the test), ``GITHUB_ENV`` and ``GITHUB_OUTPUT`` carried as Actions carries
them, and each ``uses:`` step done by its local equivalent (a checkout is a clone at the ref, an
upload both a copied folder and a zip the fake GitHub serves as the run's artifact, as GitHub
stores it). The repository is ``sglang_layout``'s, the GitHub is the fake on loopback (the real
github3.py client). Two deviations: BACKEND is cpu (no GPU here), and nothing is preloaded.
A step that only pip-installs pinned packages this venv already holds at those versions is done
by its local equivalent, nothing (as ``actions/setup-python``: this venv's Python is the job's).
"""

import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml
from ci_fake_github import FakeGitHub
from conftest import REPO, clean_env

FLOW = REPO / "ci/workflows/sglang-pr-ab.yml"
REPORT_FLOW = REPO / "ci/workflows/sglang-pr-ab-report.yml"
TOKEN = "ghs_rehearsal_token"  # an installation token, as the Actions GITHUB_TOKEN is
ACTIONS_BOT = "github-actions[bot]"  # who writes with it
PR = 7
RUN_ID = 456
FORK_BRANCH = "fix-workspace"
STARTED = "2026-01-01T00:05:00Z"  # the run's start: after the maintainer's review (fake's TS)


def load(path=FLOW):
    return yaml.safe_load(Path(path).read_text())


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True).stdout.strip()


def zipped(folder: Path) -> bytes:
    """The folder's files at the zip's top, as upload-artifact stores a folder."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return buffer.getvalue()


def serve_artifact(fake, name: str, data: bytes) -> int:
    """``data`` as an artifact called ``name`` of run RUN_ID on the fake; its id."""
    with fake.lock:
        fake._next_id += 1
        artifact_id = fake._next_id
    fake.artifacts.setdefault(RUN_ID, []).append(
        {"id": artifact_id, "name": name, "size_in_bytes": len(data), "expired": False}
    )
    fake.blobs[artifact_id] = data
    return artifact_id


class Rehearsal:
    """One workflow run, played locally; ``expressions`` answers the ``${{ }}`` it uses."""

    def __init__(self, tmp, fake, repo, base, head):
        self.tmp, self.fake, self.repo = tmp, fake, repo
        self.artifacts = tmp / "artifacts"
        self.artifacts.mkdir(exist_ok=True)
        self.log = ""
        bot_ref = git(REPO, "rev-parse", "HEAD")
        self.expressions = {
            "github.event.pull_request.number": str(PR),
            "github.server_url": "https://github.invalid",
            "github.repository": "sgl/sglang",
            "github.run_id": str(RUN_ID),
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

    def job(self, job_id, extra=None, flow=None, event="event.json") -> tuple[str, dict, str]:
        """Run one job of ``flow`` (default the pull_request workflow) with the event payload
        ``event`` (under tmp); its result (success or failure), its outputs and its summary."""
        extra = dict(extra or {})
        flow = flow or self.flow
        job = flow["jobs"][job_id]
        which = re.sub(r"\W+", "-", flow["name"])[:24]
        folder = self.tmp / f"{which}-{job_id}-{extra.get('matrix.shard', '')}"
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
            GITHUB_EVENT_PATH=str(self.tmp / event),
            GITHUB_REPOSITORY="sgl/sglang",
            GITHUB_RUN_ID=str(RUN_ID),
        )
        env.pop("GITHUB_TOKEN", None)
        for scope in (flow["env"], job.get("env", {})):
            env.update({k: self.value(v, extra) for k, v in scope.items()})
        env["BACKEND"] = "cpu"  # the first deviation: no GPU here
        env["CI_REPORT_SETTLE_S"] = "0"  # the second: one writer alone, no race to wait out
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
            elif installed(step["run"]):
                ok = True
            else:
                proc = subprocess.run(
                    ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                    cwd=workspace,
                    env=step_env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                self.log += proc.stdout + proc.stderr
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
                serve_artifact(self.fake, given["name"], zipped(source))
            return True
        if uses == "actions/download-artifact":
            pattern = given["pattern"]
            target = Path(given["path"])
            for found in self.artifacts.glob(pattern):
                shutil.copytree(found, target / found.name)
            return True
        raise AssertionError(f"the rehearsal has no local equivalent of {uses}")


def installed(command: str) -> bool:
    """Whether ``command`` is ``python -m pip install -q NAME==VERSION...`` and this venv holds
    every NAME at its VERSION (pip would find each requirement already satisfied)."""
    words = command.split()
    if words[:5] != ["python", "-m", "pip", "install", "-q"] or len(words) == 5:
        return False
    for requirement in words[5:]:
        name, _, version = requirement.partition("==")
        try:
            if not version or importlib.metadata.version(name) != version:
                return False
        except importlib.metadata.PackageNotFoundError:
            return False
    return True


def pull_request_event(tmp, base, head, fork=None) -> None:
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


def workflow_run_event(tmp, head, conclusion, fork, **run) -> str:
    """GitHub's payload of the completed pull_request run RUN_ID (the fork's), as the report
    workflow receives it; its file name under ``tmp``."""
    event = {
        "action": "completed",
        "workflow_run": {
            "id": RUN_ID,
            "name": load()["name"],
            "event": "pull_request",
            "head_sha": head,
            "head_branch": FORK_BRANCH,
            "head_repository": {"full_name": fork},
            "conclusion": conclusion,
            "path": ".github/workflows/sglang-pr-ab.yml",
            "html_url": f"https://github.invalid/sgl/sglang/actions/runs/{RUN_ID}",
            "triggering_actor": {"login": "contributor"},
            "created_at": STARTED,
            "pull_requests": [],  # GitHub lists none for a fork's run
            **run,
        },
        "repository": {"full_name": "sgl/sglang", "default_branch": "main"},
    }
    (tmp / "workflow_run.json").write_text(json.dumps(event))
    return "workflow_run.json"


def fork_pr(fake, head, fork) -> None:
    """PR 7 from ``fork``'s FORK_BRANCH at ``head``, approved by a maintainer's review of it; the
    run's workflow file as the default branch has it (this checkout's drop-in, at both refs)."""
    fake.add_pr(PR, "Adds a regression test.", head_sha=head, fork=fork)
    fake.pr_meta[PR]["branch"] = FORK_BRANCH
    fake.permissions["maint"] = "write"
    fake.add_review(PR, "maint", head)
    blob = git(REPO, "hash-object", str(FLOW))
    for ref in (head, "main"):
        fake.contents[(ref, ".github/workflows/sglang-pr-ab.yml")] = blob


def report_fork_run(tmp, fake, repo, base, head, conclusion, fork, **run):
    """The report workflow's job for the finished run: (result, summary, the play)."""
    play = Rehearsal(tmp, fake, repo, base, head)
    event = workflow_run_event(tmp, head, conclusion, fork, **run)
    result, _, summary = play.job("report", flow=load(REPORT_FLOW), event=event)
    return result, summary, play


def rehearse(tmp, repo, branch, fork=None):
    """A PR from ``branch`` onto main (``fork``: OWNER/NAME of the fork it comes from, approved by
    a maintainer's review of its head), played through gate, every shard and the report; for a
    fork, then the report workflow on the completed run (the pull_request run's token is
    read-only, as a fork's is)."""
    base, head = git(repo, "rev-parse", "main"), git(repo, "rev-parse", branch)
    pull_request_event(tmp, base, head, fork)
    fake = FakeGitHub(token=TOKEN, owner="sgl", repo="sglang", bot=ACTIONS_BOT).start()
    try:
        if fork:
            fork_pr(fake, head, fork)
        else:
            fake.add_pr(PR, "Adds a regression test.", head_sha=head)
        fake.read_only = bool(fork)
        play = Rehearsal(tmp, fake, repo, base, head)
        gate, outputs, _ = play.job("gate")
        assert gate == "success", play.log
        needs = {f"needs.gate.outputs.{k}": v for k, v in outputs.items()}
        tested = [
            play.job("test", {**needs, "matrix.shard": str(shard)})
            for shard in play.flow["jobs"]["test"]["strategy"]["matrix"]["shard"]
        ]
        shards = [result for result, _, _ in tested]
        merged = {k: v for _, outputs, _ in tested for k, v in outputs.items()}  # as Actions merges
        test_result = "success" if set(shards) == {"success"} else "failure"
        report, _, summary = play.job(
            "report",
            {**needs, "needs.test.result": test_result, "toJSON(needs.test.outputs)": json.dumps(merged)},
        )
        played = {
            "fake": fake,
            "gate": outputs,
            "shards": shards,
            "report": report,
            "summary": summary,
            "head": head,
            "play": play,
            "pr_run_writes": [(m, p) for m, p in fake.requests if m != "GET"],
        }
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
