"""Pure rendering: the evidence in, markdown out (the sticky comment, which is also report.md,
the check run's summary and the step summary; the PR-body slot text; one commit-status
description per suite). No GitHub, no clock. Every piece of untrusted text goes through
``ci.reporter.escape`` on its way in. The kinds a reviewer reads are words ("fixed by this PR",
"unchanged"); results.json keeps the exact kinds.
"""

import os
import re
from collections import Counter

from ci.evidence.model import FILE_CASE, Case, Results
from ci.reporter.escape import clip, escape_block, escape_inline, escape_name, safe_clip
from ci.reporter.pr_states import DEFAULT_SLOT, MISSING_LABEL

STATUS_LIMIT = 140
STATES = {
    "success": ":white_check_mark:",
    "failure": ":x:",
    "not-reproduced": ":warning:",
    "pending": ":hourglass_flowing_sand:",
    "cancelled": ":no_entry_sign:",
}
STALE_LABEL = (
    ":x: **No approval of this commit** -- a maintainer reviews it, then adds `run-ci` again."
)
# kind -> what it means to a reviewer of the pull request, and the side whose log excerpt shows
# why (a regression's assertion is in its row; its log in the artifacts).
VERDICTS = {
    "regression": ("fixed by this PR", None),
    "preservation": ("unchanged", None),
    "not-reproduced": ("bug not reproduced", None),
    "broken": ("broken by this PR", "change"),
    "skipped": ("skipped", None),
    "no-baseline": ("no baseline", None),
    "masked-by-retry": ("hidden by a retry", "unmodified"),
    "flaky": ("flaky with this PR", "change"),
    "unproven": ("not proven", None),
}
EXCERPT_CHARS = 600
_RAISED = re.compile(r"^[\w.]*(?:Error|Exception|Failure|Interrupt|Exit)\b.*$", re.M)


def comment_marker(slot: str) -> str:
    """The hidden line that finds our sticky comment again on reruns."""
    return f"<!-- sglang-overlay-ci:{slot} -->"


def overall_state(results: Results) -> str:
    return {"ok": "success", "void": "not-reproduced"}.get(results.verdict, "failure")


def slot_text(state: str, run_id=None, run_url=None, artifacts_url=None, note=None) -> str:
    """One line for the PR-body slot: a state emoji, then a link to the run when there is one."""
    if state == "missing-label":
        return MISSING_LABEL
    if state == "stale-label":
        return STALE_LABEL
    parts = [STATES[state]]
    if run_id and run_url:
        parts.append(f"[Run #{escape_inline(run_id)}]({_url(run_url)})")
    elif run_url or artifacts_url:
        parts.append(f"[results]({_url(run_url or artifacts_url)})")
    if note:
        parts.append("-- " + escape_inline(note))
    return " ".join(parts)


def status_descriptions(results: Results) -> dict:
    """suite -> (state, description <= 140 chars): success only where the whole run is ok."""
    statuses = {}
    for suite, cases in results.suites().items():
        broken = sum(case.kind == "broken" for case in cases)
        counts = Counter(VERDICTS[case.kind][0] for case in cases)
        text = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no cases ran"
        if results.verdict != "ok":
            text = f"{results.verdict}: {text}"
        state = "success" if results.verdict == "ok" and not broken else "failure"
        statuses[suite] = (state, clip(f"A/B {results.backend}: {text}", STATUS_LIMIT))
    return statuses


def retry_note(cases) -> str | None:
    """What the retries hid, in words (None when no test passed only on a retry)."""
    counts = Counter(case.kind for case in cases)
    parts = [
        f"{counts[kind]} {VERDICTS[kind][0]}"
        for kind in ("masked-by-retry", "flaky", "unproven")
        if counts[kind]
    ]
    return "; ".join(parts) or None


def failure_line(detail: str) -> str:
    """The assertion a failure's traceback ends in: its first AssertionError, else the last
    exception it names, else its last line."""
    raised = _RAISED.findall(detail or "")
    asserted = [line for line in raised if line.startswith("AssertionError")]
    lines = asserted[:1] or raised[-1:] or (detail or "").strip().splitlines()[-1:]
    return lines[0].strip() if lines else ""


def cell(case: Case, mode: str, assertion: bool = False) -> str:
    """One side's outcome for a table cell: the word, with ``assertion`` what failed, the peak."""
    outcome = case.modes.get(mode)
    if outcome is None or outcome.outcome == "missing":
        return "\u2014"
    word = {"pass": "Pass", "fail": "Fail", "error": "Error", "skip": "Skip"}[outcome.outcome]
    if outcome.passed_on_retry:
        word = f"Fail, then Pass on retry ({len(outcome.attempts)} attempts)"
    elif outcome.unproven:
        word = "Pass, attempts not seen"
    elif assertion and outcome.outcome in ("fail", "error") and failure_line(outcome.detail):
        word += ": " + safe_clip(escape_inline(failure_line(outcome.detail)), 110)
    if outcome.peak_mib is not None and outcome.outcome != "skip":
        word += f" \u00b7 peak {outcome.peak_mib:.1f} MiB"
    return word


def environment_line(environment: dict, backend: str = "cuda") -> str:
    """Where the tests ran, in one line: the device (the GPUs of a CUDA run, "CPU" for a CPU
    run whatever the machine has), torch, CUDA, sglang, whether as sglang's CI runs them, Python.
    A record of any other shape shows what it can."""
    env = _mapping(environment)
    modes = _mapping(env.get("modes"))
    probe = _mapping(modes.get("change")) or _mapping(next(iter(modes.values()), {}))
    on_cuda = backend != "cpu"
    parts = [] if on_cuda else ["CPU"]
    for gpu in map(_mapping, _sequence(env.get("gpus")) if on_cuda else ()):
        parts.append(f"{gpu.get('name')} (driver {gpu.get('driver')})")
    if probe.get("torch"):
        parts.append(f"torch {probe['torch']}")
    if on_cuda:
        parts.append(f"CUDA {probe['cuda']}" if probe.get("cuda") else "no CUDA")
    if probe.get("sglang"):
        parts.append(f"sglang {probe['sglang']}")
    settings = env.get("upstream_ci")
    if isinstance(settings, dict):
        shown = ", ".join(f"{k}={v}" for k, v in list(settings.items())[:8])
        parts.append(f"as sglang's CI runs it ({shown})")
    elif "upstream_ci" in env:
        parts.append("outside sglang's CI (no SGLANG_IS_IN_CI: no retries)")
    if probe.get("python"):
        parts.append(f"Python {probe['python']}")
    return " \u00b7 ".join(safe_clip(escape_inline(p), 200) for p in parts)


def what_ran(results: Results) -> str:
    """The heading's name for the files that ran: the registered tests, the one file, or how
    many."""
    paths = [file.path for file in results.files]
    if paths and all(p.startswith("test/registered/") for p in paths):
        return "the registered tests"
    if len(paths) == 1:
        return safe_clip(escape_name(paths[0]), 120)
    return f"{len(paths)} test files"


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _sequence(value) -> list:
    return value if isinstance(value, list) else []


def comment(results, slot, run_id=None, run_url=None, artifacts_url=None) -> str:
    """The whole report, rendered once: heading, verdict, one row per case, the log excerpts
    collapsed, the environment in one line. Callers cap it to where it goes (``escape.cap``)."""
    side = {mode: _side(results, mode) for mode in ("unmodified", "change")}
    lines = [
        comment_marker(slot),
        f"### {STATES[overall_state(results)]} A/B of {what_ran(results)} on "
        + safe_clip(escape_inline(results.backend), 40),
        "",
        _summary_sentence(results, side),
        "",
    ]
    flags = [
        f":warning: {safe_clip(escape_name(file.path), 300)}: "
        f"**{safe_clip(escape_inline(flag), 200)}**"
        for file in results.files
        for flag in file.flags
    ]
    lines += [*flags, ""] if flags else []
    lines += [f"| Case | Verdict | {side['unmodified']} | {side['change']} |", "|---|---|---|---|"]
    for case in results.cases:
        name = case.test if case.test != FILE_CASE else f"{case.file} {FILE_CASE}"
        lines.append(
            f"| {safe_clip(escape_name(name), 300)} | {VERDICTS[case.kind][0]} | "
            f"{cell(case, 'unmodified', True)} | {cell(case, 'change', True)} |"
        )
    excerpts = list(_excerpts(results, side))
    if excerpts:
        summary = f"Log excerpts ({len(excerpts)})"
        lines += ["", f"<details><summary>{summary}</summary>", "", *excerpts, "</details>"]
    lines += ["", *_not_run_lines(results)]
    lines.append(f"Environment: {environment_line(results.environment, results.backend)}")
    links = []
    if run_url:
        label = f"Run #{safe_clip(escape_inline(run_id), 40)}" if run_id else "run"
        links.append(f"[{label}]({_url(run_url)})")
    if artifacts_url:
        links.append(f"[results.json, report.md, JUnit and logs]({_url(artifacts_url)})")
    if links:
        lines.append("Artifacts: " + " \u00b7 ".join(links))
    if results.pictures:
        lines.append(f"Memory pictures: {len(results.pictures)} in the artifacts (pictures/).")
    return "\n".join(lines) + "\n"


def _not_run_lines(results, shown: int = 20) -> list:
    """One line per selected file that did not run on this backend, and why."""
    entries = results.selection.get("not_run")
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    lines = [
        f"Not run on {escape_inline(results.backend)}: {safe_clip(escape_name(e['file']), 300)} "
        f"({safe_clip(escape_inline(e['why']), 100)})"
        for e in entries[:shown]
        if isinstance(e.get("file"), str) and isinstance(e.get("why"), str)
    ]
    return [*lines, ""] if lines else []


def _side(results: Results, mode: str) -> str:
    return safe_clip(escape_inline(results.label(mode)), 100) if mode in results.modes else mode


def _summary_sentence(results: Results, side: dict) -> str:
    counts = results.counts()
    meaning = {
        "regression": f"fail on {side['unmodified']} and pass with {side['change']}",
        "preservation": "pass both ways",
        "broken": f"fail with {side['change']}",
    }
    parts = [
        f"**{n}** {VERDICTS[kind][0]}" + (f" ({meaning[kind]})" if kind in meaning else "")
        for kind, n in counts.items()
        if n
    ]
    sentence = ("; ".join(parts) or "No cases ran") + "."
    reasons = [f"**{safe_clip(escape_name(r), 300)}**" for r in results.reasons]
    return " ".join([sentence, *reasons])


def _excerpts(results: Results, side: dict):
    """A bold name line and a fenced excerpt per case whose failure explains its verdict."""
    for case in results.cases:
        mode = VERDICTS[case.kind][1]
        outcome = case.modes.get(mode) if mode else None
        if outcome is None or not outcome.detail:
            continue
        if outcome.outcome not in ("fail", "error") and not outcome.passed_on_retry:
            continue
        text = outcome.detail.strip()
        text = text if len(text) <= EXCERPT_CHARS else "[...]\n" + text[-EXCERPT_CHARS:]
        name = safe_clip(escape_name(case.test), 300)
        yield f"**{name}** ({side[mode]})\n\n{escape_block(text)}\n"


def write_full_report(results: Results, out: str) -> None:
    """report.md: the whole report, for the artifact."""
    with open(os.path.join(out, "report.md"), "w", encoding="utf-8", errors="replace") as handle:
        handle.write(comment(results, DEFAULT_SLOT))


def _url(url) -> str:
    # A URL goes inside (...) : spaces and parentheses would end it.
    return str(url).replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C")
