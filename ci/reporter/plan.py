"""``ci report``: a ``ReportRequest`` -> a ``ReportPlan`` that the dry run prints and ``--post``
sends (``github_io``). Bad arguments raise ``CiError`` (exit 2, one line)."""

import datetime
import json
import os
import re
from dataclasses import dataclass

from ci.errors import CiError
from ci.evidence import shards
from ci.evidence.model import EvidenceError
from ci.reporter import gate, pr_states, render
from ci.reporter.escape import cap
from ci.reporter.pr_states import BODY_LIMIT, DEFAULT_LABEL, DEFAULT_SLOT

INVALID_NOTE = "invalid artifact"
STEP_SUMMARY_BYTES = 1024 * 1024  # GitHub drops a step's summary whole past 1 MiB
CHECK_SUMMARY_LIMIT = 65535
RESULTS_ARTIFACT = "dsv4-results"
MAX_SHARDS = 256  # GitHub runs at most 256 jobs of one matrix
ARTIFACT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


@dataclass(frozen=True)
class ReportRequest:
    results: tuple[str, ...] = ()  # results.json or its folder; several: the shards of one run
    repo: str | None = None
    pr: int | None = None
    sha: str | None = None
    api_url: str | None = None
    slot: str = DEFAULT_SLOT
    slot_label: str = DEFAULT_LABEL
    state: str = "results"
    test_result: str | None = None  # trusted: the test job's result, or the run's conclusion
    require_head: bool = False
    check_run: bool = False
    summary: str | None = None
    workflow_run: str | None = None
    artifact: str = RESULTS_ARTIFACT  # the fork run's results artifact; with shards, NAME-I each
    shards: int | None = None  # the fork run's shard count (its matrix), from our own workflow
    run_id: str | None = None
    run_url: str | None = None
    artifacts_url: str | None = None
    bot_login: str | None = None
    post: bool = False
    invalid: str | None = None  # the artifact was refused before it was read (its size)
    shard_artifacts: tuple | None = None  # the artifact each of ``results`` came from, in order

    @property
    def links(self) -> dict:
        return dict(run_id=self.run_id, run_url=self.run_url, artifacts_url=self.artifacts_url)


@dataclass(frozen=True)
class ReportPlan:
    """Everything a report sends, decided before anything is sent."""

    repo: str | None
    pr: int | None
    slot: str
    slot_line: str
    comment: str | None
    statuses: tuple  # of {context, state, description, target_url}; none without a sha
    sha: str | None
    check_run: dict | None  # {"create": ..., "updates": [...]}
    texts: tuple  # the slot text with links, and without (for comparing with what is there)
    summary: str  # for the step summary: the full report, or the slot's line
    invalid: str | None = None  # why the artifact was refused (the slot says failure)


def prepare(request: ReportRequest) -> ReportRequest:
    """The request, checked (a workflow_run's payload is ``github_io.fork``'s to read)."""
    if request.post and not request.workflow_run and (not request.repo or request.pr is None):
        raise CiError("--post needs --repo OWNER/NAME and --pr N")
    if request.shards is not None and not request.workflow_run:
        raise CiError("--shards is the fork path's: with --workflow-run (else --results A B)")
    if request.shards is not None and not 1 <= request.shards <= MAX_SHARDS:
        raise CiError(f"--shards {request.shards}: between 1 and {MAX_SHARDS}")
    if not ARTIFACT_NAME.fullmatch(request.artifact):
        raise CiError(f"--artifact {request.artifact[:80]!r}: letters, digits, '_.-' only")
    if request.repo and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", request.repo):
        raise CiError(f"--repo {request.repo!r}: expected OWNER/NAME")
    if (request.require_head or request.check_run) and not (request.sha or request.workflow_run):
        raise CiError("--require-head and --check-run need --sha")
    if request.sha is not None and not gate.COMMIT_SHA.fullmatch(request.sha):
        raise CiError(f"--sha {request.sha[:80]!r}: expected a full commit id (40 hex digits)")
    missing = [p for p in request.results if not os.path.exists(p)]
    if missing and not request.workflow_run and not request.test_result:
        raise CiError(f"--results {missing[0]}: no such folder or file")
    try:
        pr_states.slot_line(request.slot, request.slot_label, "")
    except ValueError as exc:
        raise CiError(str(exc)) from None
    return request


def plan(request: ReportRequest) -> ReportPlan:
    """What the report for ``request`` (already ``prepare``d) would send."""
    state, invalid, untrusted, model, full = request.state, request.invalid, None, None, None
    if invalid:
        state = "failure"
    elif state == "results" and request.test_result and not _has_results(request.results):
        state = "cancelled" if request.test_result in ("cancelled", "skipped") else "failure"
    if state == "results":
        if not request.results:
            raise CiError("--results DIR is required: the folder `ci run --out` wrote")
        try:
            model = shards.load(request.results, request.shard_artifacts)
        except EvidenceError as exc:  # refused whole and said so, never left pending
            state, invalid = "failure", str(exc)
    result = request.test_result
    if model and render.overall_state(model) == "success" and result not in (None, "success"):
        # What GitHub says of the job outranks what the job's own files say: never green.
        untrusted = f"the test job's result is {result[:20]}, although its results say all passed"
        model, state = None, "cancelled" if result == "cancelled" else "failure"
    statuses, note = [], INVALID_NOTE if invalid else untrusted
    if model is not None:
        state, note = render.overall_state(model), render.retry_note(model.cases)
        full = render.comment(model, request.slot, **request.links)  # capped per place
        statuses = render.statuses(model, request.slot, request.run_url)
    texts = tuple(render.slot_text(state, **links, note=note) for links in (request.links, {}))
    refused = ("Invalid artifact", invalid) if invalid else ("Not reported", untrusted)
    return ReportPlan(
        request.repo, request.pr, request.slot,
        slot_line=pr_states.slot_line(request.slot, request.slot_label, texts[0]),
        comment=None if full is None else cap(full, BODY_LIMIT),
        statuses=tuple(statuses) if request.sha else (), sha=request.sha,
        check_run=_check_run(request, model, state, refused if refused[1] else None, full),
        texts=texts, summary=cap(full, STEP_SUMMARY_BYTES) if full else f"{texts[0]}\n",
        invalid=invalid,
    )  # fmt: skip


def _has_results(paths) -> bool:
    """Whether every shard's test job left its results (the file, or its folder)."""
    found = [os.path.isfile(p) or os.path.isfile(os.path.join(p, "results.json")) for p in paths]
    return bool(paths) and all(found)


def _check_run(request: ReportRequest, model, state: str, refused, full):
    if not request.check_run or state in ("pending", "missing-label", "stale-label"):
        return None
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if model is None:
        return render.check_run_without_results(state, request.sha, now, request.run_url, refused)
    summary = cap(full.split("\n", 1)[1], CHECK_SUMMARY_LIMIT)  # less the marker line
    return render.check_run(model, request.sha, summary, now, request.run_url)


def write_summary(request: ReportRequest, report: ReportPlan) -> None:
    if request.summary:
        try:
            with open(request.summary, "a", encoding="utf-8") as handle:
                handle.write(report.summary)
        except OSError as exc:
            raise CiError(f"--summary {request.summary}: {exc.strerror}") from None


def dry_run_text(report: ReportPlan, as_json: bool) -> str:
    if as_json:
        shown = ("repo", "pr", "slot", "slot_line", "comment", "statuses", "sha", "check_run")
        return json.dumps({key: getattr(report, key) for key in shown}, indent=2) + "\n"
    target = f"{report.repo} PR #{report.pr}" if report.repo else "none (local preview)"
    out = [f"# dry run: nothing is sent. Target: {target}\n",
           f"\n## PR body: slot {report.slot!r} set to this line (block added if missing)\n\n",
           report.slot_line + "\n"]  # fmt: skip
    if report.comment is not None:
        out += ["\n## sticky comment (created, or edited in place on reruns)\n\n", report.comment]
    out.append("\n## commit statuses" + (f" on {report.sha}" if report.sha else "") + "\n\n")
    out += [json.dumps(status) + "\n" for status in report.statuses]
    if report.comment is not None and not report.sha:
        out.append("(none: pass --sha to set one per suite)\n")
    if report.check_run:
        create = report.check_run["create"]
        more = sum(len(u["annotations"]) for u in report.check_run["updates"])
        out.append(f"\n## check run on {report.sha}: {create['conclusion']}\n\n")
        for note in create.get("output", {}).get("annotations", []):
            level, path, line = note["annotation_level"], note["path"], note["start_line"]
            out.append(f"{level} {path}:{line} {note['message']}\n")
        if more:
            out.append(f"(and {more} more annotations in follow-up updates)\n")
    return "".join(out)
