"""What ``ci report`` and ``ci gate`` do with GitHub: ``publish`` a plan; ``fork``: a fork run's
PR, approval and results artifacts (capped, only results.json read); ``fork_facts`` for the gate."""

import contextlib
import io
import os
import re
import zipfile
import zlib
from dataclasses import replace

import github3.exceptions

from ci.errors import CiError
from ci.evidence import model as evidence
from ci.evidence.model import EvidenceError
from ci.reporter import gate
from ci.reporter.plan import ReportPlan, ReportRequest
from ci.reporter.publish import Publisher, PublishFailed, connect

MAX_ARTIFACT_BYTES = 256 * 1024 * 1024  # the zip: results.json, report.md, JUnit, logs, pictures
SETTLE_ENV = "CI_REPORT_SETTLE_S"
# What zipfile raises for a damaged, truncated, encrypted or exotic archive.
_UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)


@contextlib.contextmanager
def _github(repo: str, pr: int | None, api_url: str | None, why: str):
    """A ``Publisher`` for ``repo``'s PR ``pr`` with the token in GITHUB_TOKEN."""
    token = os.environ.get("GITHUB_TOKEN")
    if not token:
        raise CiError(f"{why} needs a token in GITHUB_TOKEN")
    owner, name = repo.split("/")
    settle = os.environ.get(SETTLE_ENV) or str(Publisher.settle_s)
    if not re.fullmatch(r"[0-9]{1,2}(\.[0-9]*)?", settle) or float(settle) > 60:
        raise CiError(f"{SETTLE_ENV}={settle!r}: seconds from 0 to 60")
    try:
        yield Publisher(connect(token, api_url), owner, name, pr, settle_s=float(settle))
    except (github3.exceptions.GitHubException, RuntimeError, ValueError, OSError) as exc:
        raise PublishFailed(str(exc).replace(token, "***")) from None


def publish(request: ReportRequest, report: ReportPlan, say) -> None:
    """Send ``report``; ``say(line)`` hears each step."""
    with _github(request.repo, request.pr, request.api_url, "--post") as publisher:

        def superseded(what: str) -> bool:
            """With --require-head, whether a push moved the PR on (a status names its commit)."""
            if not request.require_head or (head := publisher.pr_head()) == request.sha:
                return False
            say(f"PR #{request.pr} head is {head[:12] or 'unknown'}, not {request.sha[:12]}: "
                f"this run is superseded (or not this PR's); {what}")  # fmt: skip
            return True

        if superseded("nothing posted"):
            return
        outcome = publisher.update_slot(request.slot, request.slot_label, list(report.texts))
        say(f"PR body slot {request.slot}: {outcome}")
        moved = superseded("our slot write is undone and the comment skipped")
        if moved and outcome == "updated":
            back = publisher.put_back_slot(request.slot, request.slot_label)
            say(f"PR body slot {request.slot}: {back}")
        if report.comment is not None and not moved:
            login = publisher.identity(request.bot_login)
            said = publisher.upsert_comment(report.comment, login)
            say(f"sticky comment ({login}): {said}")
        for status in report.statuses:
            publisher.set_status(request.sha, status)
            say(f"status {status['context']}: {status['state']}")
        if report.comment is not None and not request.sha:
            say("statuses: skipped (no --sha)")
        if report.check_run is not None:
            run_id = publisher.create_check_run(**report.check_run)
            say(f"check run {run_id}: {report.check_run['create']['conclusion']}")


def fork(request: ReportRequest, folder: str):
    """(request, note) for a fork run: its PR, whether a writer approved its head before the run,
    its results artifacts (NAME, or NAME-I per shard) in ``folder``; (None, why): nothing to do."""
    try:
        run = gate.finished_run(gate.load_event(request.workflow_run))
    except (OSError, ValueError) as exc:
        raise CiError(f"workflow_run report: {exc}") from None
    request = replace(request, repo=run.repo, sha=run.head_sha, run_id=str(run.run_id),
                      run_url=run.html_url or None, require_head=True, check_run=True)  # fmt: skip
    with _github(request.repo, None, request.api_url, "--workflow-run (it reads GitHub)") as github:
        owner = (run.head_repo or "").split("/")[0]
        query = {"head": f"{owner}:{run.head_branch}", "state": "open", "per_page": 100}
        found = github.request("GET", f"PRs of {query['head']}", "pulls", params=query)
        heads = [(p, p.get("head") or {}) for p in (found if isinstance(found, list) else [])]
        pulls = [p for p, head in heads if head.get("sha") == run.head_sha
                 and (head.get("repo") or {}).get("full_name") == run.head_repo]  # fmt: skip
        if len(pulls) != 1:
            return None, f"{len(pulls)} open PRs have head {run.head_sha[:12]}: nothing posted"
        request = replace(request, pr=pulls[0]["number"])
        github.number = request.pr
        decision = gate.decide(github.pull_facts(run.actor, run.created_at))
        if decision.sha != run.head_sha:
            return None, f"PR #{request.pr} moved on from {run.head_sha[:12]}: nothing posted"
        if not decision.run:
            return replace(request, state=decision.state), None
        count, artifact = request.shards, request.artifact
        names = (artifact,) if count is None else tuple(f"{artifact}-{i}" for i in range(count))
        listed = {name: _artifacts_named(github, run.run_id, name) for name in names}
        ran = run.conclusion in ("success", "skipped")
        if ran and not any(listed.values()):
            return None, f"run {run.run_id} left no {', '.join(names)}: it ran no tests"
        twice = [f"{name}: {len(found)} artifacts of that name in run {run.run_id}"
                 for name, found in listed.items() if len(found) > 1]  # fmt: skip
        absent = [name for name, found in listed.items() if not found]
        given = f"(given: {len(names) - len(absent)} of {len(names)})"
        missing = f"{', '.join(absent)} missing from run {run.run_id} {given}" if absent else None
        if twice or (missing and ran):
            return replace(request, invalid=twice[0] if twice else missing), None
        if missing:  # a shard's job ended before its upload: the slot says so, as for one
            return replace(request, test_result=run.conclusion), missing
        folders = tuple(os.path.join(folder, name) for name in names)
        for name, into in zip(names, folders, strict=True):
            try:
                _fetch(github, listed[name][0], into)
            except EvidenceError as exc:
                return replace(request, invalid=f"{name}: {exc}"), None
        named = {} if count is None else {"shard_artifacts": names}  # errors name the shard
        # The conclusion stays: green results of a run that did not succeed are never green.
        return replace(request, test_result=run.conclusion, results=folders, **named), None


def _artifacts_named(github: Publisher, run_id: int, name: str) -> list:
    """Every live artifact of the run called ``name`` (a test's leftover process can add one)."""
    found = github.request("GET", f"artifacts of run {run_id}", "actions", "runs", run_id,
                           "artifacts", params={"name": name, "per_page": 100})  # fmt: skip
    listed = found.get("artifacts") if isinstance(found, dict) else None
    return [a for a in listed or [] if isinstance(a, dict) and a.get("name") == name
            and not a.get("expired")]  # fmt: skip


def _fetch(github: Publisher, found: dict, folder: str) -> None:
    """The artifact ``found`` as ``folder``/results.json, refused first on its listed size."""
    size, limit = found.get("size_in_bytes"), MAX_ARTIFACT_BYTES
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= limit:
        raise EvidenceError(f"{size!r} bytes; at most {limit}")
    os.makedirs(folder, exist_ok=True)
    extract_results(io.BytesIO(github.download(found["id"], limit)), folder)


def extract_results(zipped, folder: str) -> None:
    """results.json, the one member read, out of the zip: at most MAX_RESULTS_BYTES of it."""
    limit = evidence.MAX_RESULTS_BYTES
    try:
        with zipfile.ZipFile(zipped) as archive, archive.open("results.json") as member:
            data = member.read(limit + 1)
    except KeyError:
        raise EvidenceError("the artifact has no results.json at its top") from None
    except _UNREADABLE as exc:
        raise EvidenceError(f"the artifact is not a readable zip ({type(exc).__name__})") from None
    if len(data) > limit:
        raise EvidenceError(f"results.json: more than {limit} bytes")
    with open(os.path.join(folder, "results.json"), "wb") as handle:
        handle.write(data)


def fork_facts(repo, pr: int | None, sender, api_url: str | None) -> gate.PullFacts:
    """A fork PR's head, labels and approvals as GitHub has them now, not as the payload did
    (``repo`` and ``sender``: the payload's, any JSON value)."""
    if not isinstance(repo, str) or repo.count("/") != 1 or pr is None:
        raise CiError("a fork PR's approvals are read from GitHub: the payload's repository "
                      "and PR number are needed")  # fmt: skip
    with _github(repo, pr, api_url, "reading a fork PR's approvals") as github:
        return github.pull_facts(trigger=sender if isinstance(sender, str) else None)
