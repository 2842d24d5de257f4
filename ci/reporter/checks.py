"""The Checks API's request bodies, pure: one check run per report, the comment as its summary,
an annotation at the ``def`` line of each regression, broken, masked or flaky case."""

from ci.evidence.model import MODES, Case, Results
from ci.reporter.escape import cap, clip, escape_inline, name_text, visible
from ci.reporter.render import retry_note

NAME = "DSV4 workspace A/B"
SUMMARY_LIMIT = 65535
ANNOTATIONS_PER_REQUEST = 50
MAX_ANNOTATIONS = 500
NO_RESULTS = {
    "failure": "The test job failed before it wrote results; see the run's log.",
    "cancelled": "The test job was cancelled (a newer push, or a timeout) before it wrote results.",
}


def bodies(results: Results, head_sha: str, summary: str, now: str, details_url=None):
    """(the create body, the outputs of the updates that carry annotations 51 and on)."""
    labels = {mode: results.label(mode) for mode in MODES}
    notes = [a for a in (_annotation(c, labels) for c in results.cases) if a is not None]
    counts = ", ".join(f"{n} {kind}" for kind, n in results.counts().items() if n)
    title = f"A/B on {results.backend}: {counts or 'no cases'}"
    retried = retry_note(results.cases)
    if retried:
        title += f" -- {retried}"
    if len(notes) > MAX_ANNOTATIONS:
        title += f" (annotations on the first {MAX_ANNOTATIONS} of {len(notes)})"
        notes = notes[:MAX_ANNOTATIONS]
    output = {"title": clip(title, 255), "summary": cap(summary, SUMMARY_LIMIT)}
    step = ANNOTATIONS_PER_REQUEST
    batches = [notes[i : i + step] for i in range(0, len(notes), step)] or [[]]
    outputs = [{**output, "annotations": batch} for batch in batches]
    conclusion = {"ok": "success", "void": "neutral"}.get(results.verdict, "failure")
    return _check_create(head_sha, conclusion, now, details_url, outputs[0]), outputs[1:]


def without_results(state: str, head_sha: str, now: str, details_url, refused=None):
    """The check run of a job that left no results, or whose results were ``refused`` (title,
    why)."""
    if refused:
        summary = f"The test job's results were refused: {escape_inline(refused[1])}"
        output = {"title": refused[0], "summary": summary[:2000]}
    else:
        output = {"title": f"No results: {state}", "summary": NO_RESULTS[state]}
    return _check_create(head_sha, state, now, details_url, output)


def _annotation(case: Case, labels: dict) -> dict | None:
    def peak(mode):
        mib = getattr(case.modes.get(mode), "peak_mib", None)
        return "" if mib is None else f" (peak {mib:.1f} MiB)"

    base, change = case.modes.get("unmodified"), case.modes.get("change")
    if case.kind == "regression":
        word = base.outcome if base else "fail"
        message = f"{word} on {labels['unmodified']}{peak('unmodified')}; "
        level, message = "notice", message + f"passes on {labels['change']}{peak('change')}"
    elif case.kind in ("masked-by-retry", "flaky"):
        side = labels["unmodified" if case.kind == "masked-by-retry" else "change"]
        level, message = "failure", f"{case.kind} on {side}: failed at first, passed on the retry"
    elif case.kind == "unproven":
        message = "not proven: it passed, but the runner could not count its attempts"
        level = "failure"
    elif case.kind == "broken":
        detail = f": {change.detail[-1500:]}" if change and change.detail else ""
        outcome = change.outcome if change else "missing"
        level, message = "failure", f"fails on {labels['change']} ({outcome}){detail}"
    else:
        return None
    line = case.line or 1
    title, message = clip(name_text(case.test), 255), clip(visible(message), 4000)
    where = {"path": case.file, "start_line": line, "end_line": line}
    return {**where, "annotation_level": level, "title": title, "message": message}


def _check_create(head_sha: str, conclusion: str, now: str, details_url, output: dict) -> dict:
    body = {"name": NAME, "head_sha": head_sha, "status": "completed", "conclusion": conclusion}
    return {**body, "completed_at": now, **({"details_url": details_url} if details_url else {}),
            "output": output}  # fmt: skip
