"""Pure rendering, evidence in, what GitHub shows out: the comment (also report.md and the
summaries), the slot text, the commit statuses and the check run's request bodies. Untrusted text
goes through ``ci.reporter.escape`` (R3)."""

import os
import re
from collections import Counter

from ci.evidence.judge import tail
from ci.evidence.model import FILE_CASE, MODES, Case, Results
from ci.reporter.escape import clip, escape_block, escape_inline, escape_name, name_text, visible
from ci.reporter.pr_states import DEFAULT_SLOT, MISSING_LABEL

STATES = {"success": ":white_check_mark:", "failure": ":x:", "not-reproduced": ":warning:",
          "pending": ":hourglass_flowing_sand:", "cancelled": ":no_entry_sign:"}  # fmt: skip
STALE_LABEL = (
    ":x: **No approval of this commit** -- a maintainer reviews it, then adds `run-ci` again."
)
# kind -> what it means to a reviewer, the side whose log excerpt shows why, and the level of the
# check-run annotation at its test (None: none).
VERDICTS = {
    "regression": ("fixed by this PR", None, "notice"),
    "preservation": ("unchanged", None, None),
    "not-reproduced": ("bug not reproduced", None, None),
    "broken": ("broken by this PR", "change", "failure"),
    "skipped": ("skipped", None, None),
    "no-baseline": ("no baseline", None, None),
    "masked-by-retry": ("hidden by a retry", "unmodified", "failure"),
    "flaky": ("flaky with this PR", "change", "failure"),
    "unproven": ("not proven", None, "failure"),
}
CHECK_NAME = "DSV4 workspace A/B"
ANNOTATIONS_PER_REQUEST = 50
MAX_ANNOTATIONS = 500
NO_RESULTS = {
    "failure": "The test job failed before it wrote results; see the run's log.",
    "cancelled": "The test job was cancelled (a newer push, or a timeout) before it wrote results.",
}
_RAISED = re.compile(r"^[\w.]*(?:Error|Exception|Failure|Interrupt|Exit)\b.*$", re.M)


def _text(text, limit: int) -> str:
    return clip(escape_inline(text), limit)


def _name(text, limit: int = 300) -> str:
    return clip(escape_name(text), limit)


def _url(url) -> str:
    return str(url).replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C")


def comment_marker(slot: str) -> str:
    return f"<!-- sglang-overlay-ci:{slot} -->"


def overall_state(results: Results) -> str:
    return {"ok": "success", "void": "not-reproduced"}.get(results.verdict, "failure")


def slot_text(state: str, run_id=None, run_url=None, artifacts_url=None, note=None) -> str:
    """One line for the PR-body slot: a state emoji, then a link to the run when there is one."""
    if state in ("missing-label", "stale-label"):
        return MISSING_LABEL if state == "missing-label" else STALE_LABEL
    parts = [STATES[state]]
    if run_id and run_url:
        parts.append(f"[Run #{escape_inline(run_id)}]({_url(run_url)})")
    elif run_url or artifacts_url:
        parts.append(f"[results]({_url(run_url or artifacts_url)})")
    return " ".join(parts + ([f"-- {escape_inline(note)}"] if note else []))


def statuses(results: Results, slot: str, target_url=None) -> list:
    """A commit status per suite, described in at most 140 characters: success only where the run
    is ok (a broken case fails it)."""
    ok, found = results.verdict == "ok", []
    for suite, cases in results.suites().items():
        counts = Counter(VERDICTS[case.kind][0] for case in cases)
        text = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no cases ran"
        text = clip(f"A/B {results.backend}: {text if ok else f'{results.verdict}: {text}'}", 140)
        state = "success" if ok else "failure"
        status = {"context": f"{slot}/{suite}", "state": state, "description": text}
        found.append({**status, "target_url": target_url} if target_url else status)
    return found


def check_run(results: Results, head_sha: str, summary: str, now: str, details_url=None):
    """The check run as {"create": its create body, "updates": outputs with annotations 51 and
    on}; an annotation at the ``def`` line of each case ``VERDICTS`` gives a level."""
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
    output = {"title": clip(title, 255), "summary": summary}
    step = ANNOTATIONS_PER_REQUEST
    batches = [notes[i : i + step] for i in range(0, len(notes), step)] or [[]]
    outputs = [{**output, "annotations": batch} for batch in batches]
    conclusion = {"ok": "success", "void": "neutral"}.get(results.verdict, "failure")
    create = _check_create(head_sha, conclusion, now, details_url, outputs[0])
    return {"create": create, "updates": outputs[1:]}


def check_run_without_results(state: str, head_sha: str, now: str, details_url, refused=None):
    """``check_run``'s bodies for a job that left no results, or whose results were ``refused``
    (title, why)."""
    if refused:
        summary = f"The test job's results were refused: {escape_inline(refused[1])}"
        output = {"title": refused[0], "summary": clip(summary, 2000)}
    else:
        output = {"title": f"No results: {state}", "summary": NO_RESULTS[state]}
    return {"create": _check_create(head_sha, state, now, details_url, output), "updates": []}


def _annotation(case: Case, labels: dict) -> dict | None:
    """The case's row of the table as plain text, at its test's line."""
    words, _, level = VERDICTS[case.kind]
    if level is None:
        return None
    message = f"{words}: " + "; ".join(f"{labels[m]}: {cell(case, m)}" for m in MODES)
    change = case.modes.get("change")
    if case.kind == "broken" and change and change.detail:
        message += f"\n{change.detail[-1500:]}"
    line, title = case.line or 1, clip(name_text(case.test), 255)
    where = {"path": case.file, "start_line": line, "end_line": line, "annotation_level": level}
    return {**where, "title": title, "message": clip(visible(message), 4000)}


def _check_create(head_sha: str, conclusion: str, now: str, details_url, output: dict) -> dict:
    body = {"name": CHECK_NAME, "head_sha": head_sha, "status": "completed"}
    return {**body, "conclusion": conclusion, "completed_at": now,
            **({"details_url": details_url} if details_url else {}), "output": output}  # fmt: skip


def retry_note(cases) -> str | None:
    """What the retries hid, in words (None when no test passed only on a retry)."""
    counts = Counter(case.kind for case in cases)
    kinds = ("masked-by-retry", "flaky", "unproven")
    return "; ".join(f"{counts[k]} {VERDICTS[k][0]}" for k in kinds if counts[k]) or None


def _failure_line(detail: str) -> str:
    """A traceback's first AssertionError, else its last exception, else its last line."""
    raised = _RAISED.findall(detail or "")
    asserted = [line for line in raised if line.startswith("AssertionError")]
    lines = asserted[:1] or raised[-1:] or (detail or "").strip().splitlines()[-1:]
    return lines[0].strip() if lines else ""


def cell(case: Case, mode: str, assertion: bool = False) -> str:
    """One side's outcome for a table cell: the word, with ``assertion`` what failed, the peak."""
    outcome = case.modes.get(mode)
    if outcome is None or outcome.outcome == "missing":
        return "\u2014"
    word = outcome.outcome.capitalize()
    if outcome.passed_on_retry:
        word = f"Fail, then Pass on retry ({len(outcome.attempts)} attempts)"
    elif outcome.unproven:
        word = "Pass, attempts not seen"
    elif assertion and outcome.outcome in ("fail", "error") and _failure_line(outcome.detail):
        word += ": " + _text(_failure_line(outcome.detail), 110)
    if outcome.peak_mib is not None and outcome.outcome != "skip":
        word += f" \u00b7 peak {outcome.peak_mib:.1f} MiB"
    return word


def environment_line(environment: dict, backend: str = "cuda") -> str:
    """Where the tests ran, in one line (a record of any shape shows what it can)."""

    def mapping(value) -> dict:
        return value if isinstance(value, dict) else {}

    env = mapping(environment)
    modes = mapping(env.get("modes"))
    probe = mapping(modes.get("change")) or mapping(next(iter(modes.values()), {}))
    gpus = env.get("gpus") if isinstance(env.get("gpus"), list) else []
    parts = [f"{g.get('name')} (driver {g.get('driver')})" for g in map(mapping, gpus)]
    parts = parts if backend != "cpu" else ["CPU"]
    settings = env.get("upstream_ci")
    ci = "outside sglang's CI (no SGLANG_IS_IN_CI: no retries)" if "upstream_ci" in env else None
    if isinstance(settings, dict):
        shown = ", ".join(f"{k}={v}" for k, v in list(settings.items())[:8])
        ci = f"as sglang's CI runs it ({shown})"
    parts += [
        probe.get("torch") and f"torch {probe['torch']}",
        backend != "cpu" and (f"CUDA {probe['cuda']}" if probe.get("cuda") else "no CUDA"),
        probe.get("sglang") and f"sglang {probe['sglang']}",
        ci,
        probe.get("python") and f"Python {probe['python']}",
    ]
    return " \u00b7 ".join(_text(p, 200) for p in parts if p)


def comment(results, slot, run_id=None, run_url=None, artifacts_url=None) -> str:
    """The whole report; callers cap it to where it goes (``escape.cap``)."""
    side = {m: _text(results.label(m), 100) if m in results.modes else m for m in MODES}
    paths = [file.path for file in results.files]
    ran = _name(paths[0], 120) if len(paths) == 1 else f"{len(paths)} test files"
    if paths and all(p.startswith("test/registered/") for p in paths):
        ran = "the registered tests"
    state = STATES[overall_state(results)]
    lines = [comment_marker(slot), f"### {state} A/B of {ran} on {_text(results.backend, 40)}"]
    lines += ["", _summary(results, side), ""]
    flags = [
        f":warning: {_name(f.path)}: **{_text(x, 200)}**" for f in results.files for x in f.flags
    ]
    lines += [*flags, ""] if flags else []
    lines += [f"| Case | Verdict | {side['unmodified']} | {side['change']} |", "|---|---|---|---|"]
    for case in results.cases:
        name = _name(case.test if case.test != FILE_CASE else f"{case.file} {FILE_CASE}")
        cells = " | ".join([VERDICTS[case.kind][0], *(cell(case, m, True) for m in MODES)])
        lines.append(f"| {name} | {cells} |")
    excerpts = list(_excerpts(results, side))
    if excerpts:
        summary = f"<details><summary>Log excerpts ({len(excerpts)})</summary>"
        lines += ["", summary, "", *excerpts, "</details>"]
    lines += ["", *_not_run(results)]
    lines.append(f"Environment: {environment_line(results.environment, results.backend)}")
    label = f"Run #{_text(run_id, 40)}" if run_id else "run"
    links = [f"[{label}]({_url(run_url)})"] if run_url else []
    if artifacts_url:
        links.append(f"[results.json, report.md, JUnit and logs]({_url(artifacts_url)})")
    if links:
        lines.append("Artifacts: " + " \u00b7 ".join(links))
    if results.pictures:
        lines.append(f"Memory pictures: {len(results.pictures)} in the artifacts (pictures/).")
    return "\n".join(lines) + "\n"


def _not_run(results) -> list:
    """One line per selected file that did not run on this backend, and why."""
    entries = results.selection.get("not_run")
    entries = [e for e in entries if isinstance(e, dict)][:20] if isinstance(entries, list) else []
    where = f"Not run on {escape_inline(results.backend)}"
    lines = [f"{where}: {_name(e['file'])} ({_text(e['why'], 100)})" for e in entries
             if isinstance(e.get("file"), str) and isinstance(e.get("why"), str)]  # fmt: skip
    return [*lines, ""] if lines else []


def _summary(results: Results, side: dict) -> str:
    meaning = {
        "regression": f"fail on {side['unmodified']} and pass with {side['change']}",
        "preservation": "pass both ways",
        "broken": f"fail with {side['change']}",
    }
    parts = [f"**{n}** {VERDICTS[kind][0]}" + (f" ({meaning[kind]})" if kind in meaning else "")
             for kind, n in results.counts().items() if n]  # fmt: skip
    reasons = [f"**{_name(r)}**" for r in results.reasons]
    return " ".join([("; ".join(parts) or "No cases ran") + ".", *reasons])


def _excerpts(results: Results, side: dict):
    """A bold name line and a fenced excerpt per case whose failure explains its verdict."""
    for case in results.cases:
        mode = VERDICTS[case.kind][1]
        outcome = case.modes.get(mode) if mode else None
        if outcome is None or not outcome.detail:
            continue
        if outcome.outcome in ("fail", "error") or outcome.passed_on_retry:
            text = escape_block(tail(outcome.detail, 600))
            yield f"**{_name(case.test)}** ({side[mode]})\n\n{text}\n"


def write_full_report(results: Results, out: str) -> None:
    """report.md: the whole report, for the artifact."""
    with open(os.path.join(out, "report.md"), "w", encoding="utf-8", errors="replace") as handle:
        handle.write(comment(results, DEFAULT_SLOT))
