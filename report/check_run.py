"""Pure: the check run on the PR's head commit, as the request bodies GitHub's Checks API takes.

For text and structure only: no I/O, no clock (the caller passes the time). The output summary
is the evidence report; each regression case gets a ``notice`` annotation at its test's ``def``
line ("fails on sglang 0.5.23 (peak 160.0 MiB); passes on ... (peak 96.0 MiB)"), each broken case a
``failure`` annotation. GitHub takes at most 50 annotations per request, so the rest go in
follow-up updates of the same check run, which GitHub appends.
"""

from evidence.model import MODES, Case, Results
from report.render import clip, short_summary, visible

CHECK_NAME = "DSV4 workspace A/B"
SUMMARY_LIMIT = 65535
ANNOTATIONS_PER_REQUEST = 50
# Each 50 more annotations cost one more request: a results.json with 10,000 regression cases
# must not spend the repository's API rate limit. The summary still has every case.
MAX_ANNOTATIONS = 500
NO_RESULTS = {
    "failure": "The test job failed before it wrote results; see the run's log.",
    "cancelled": "The test job was cancelled (a newer push, or a timeout) before it wrote results.",
}


def conclusion(results: Results) -> str:
    return {"ok": "success", "void": "neutral"}.get(results.verdict, "failure")


def annotation(case: Case, labels: dict) -> dict | None:
    if case.kind == "regression":
        level, message = "notice", _regression_message(case, labels)
    elif case.kind == "broken":
        change = case.modes.get("change")
        detail = f": {change.detail[-1500:]}" if change is not None and change.detail else ""
        outcome = change.outcome if change is not None else "missing"
        level, message = "failure", f"fails on {labels['change']} ({outcome}){detail}"
    else:
        return None
    line = case.line or 1
    return {
        "path": case.file,
        "start_line": line,
        "end_line": line,
        "annotation_level": level,
        "title": clip(visible(case.test), 255),
        "message": clip(visible(message), 4000),
    }


def _regression_message(case: Case, labels: dict) -> str:
    def peak(mode):
        result = case.modes.get(mode)
        return (
            f" (peak {result.peak_mib:.1f} MiB)" if result and result.peak_mib is not None else ""
        )

    base = case.modes.get("unmodified")
    word = base.outcome if base is not None else "fail"
    return (
        f"{word} on {labels['unmodified']}{peak('unmodified')}; "
        f"passes on {labels['change']}{peak('change')}"
    )


def requests(
    results: Results, head_sha: str, summary: str, now: str, details_url=None, name=CHECK_NAME
) -> tuple[dict, list[dict]]:
    """(the create body, the outputs of the updates that carry annotations 51 and on)."""
    labels = {mode: results.label(mode) for mode in MODES}
    notes = [a for a in (annotation(c, labels) for c in results.cases) if a is not None]
    title = f"A/B on {results.backend}: {short_summary(results)}"
    if len(notes) > MAX_ANNOTATIONS:
        title += f" (annotations on the first {MAX_ANNOTATIONS} of {len(notes)})"
        notes = notes[:MAX_ANNOTATIONS]
    title = clip(title, 255)
    summary = clip(summary, SUMMARY_LIMIT)
    batches = [
        notes[i : i + ANNOTATIONS_PER_REQUEST]
        for i in range(0, len(notes), ANNOTATIONS_PER_REQUEST)
    ] or [[]]
    create = _create(name, head_sha, conclusion(results), now, details_url)
    create["output"] = {"title": title, "summary": summary, "annotations": batches[0]}
    updates = [{"title": title, "summary": summary, "annotations": b} for b in batches[1:]]
    return create, updates


def no_results_request(state: str, head_sha: str, now: str, details_url=None, name=CHECK_NAME):
    """The check run for a test job that left no results (``failure`` or ``cancelled``)."""
    create = _create(name, head_sha, state, now, details_url)
    create["output"] = {"title": f"No results: {state}", "summary": NO_RESULTS[state]}
    return create


def _create(name, head_sha, conclusion_, now, details_url) -> dict:
    body = {
        "name": name,
        "head_sha": head_sha,
        "status": "completed",
        "conclusion": conclusion_,
        "completed_at": now,
    }
    if details_url:
        body["details_url"] = details_url
    return body
