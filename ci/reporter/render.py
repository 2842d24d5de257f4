"""Pure rendering: the evidence in, markdown and the check run's request bodies out.

No GitHub, no clock: the sticky comment (each case on the two sides the run compared, named by
what each ran), the PR-body slot text, one commit-status description per suite, the check run.
Every piece of untrusted text (test names, log excerpts, reasons) goes through
``ci.reporter.escape`` on its way in, so that nothing from a test can break the markdown, a table, or
the hidden markers the publisher searches for, hide itself, or pose as another name.
"""

import os
from collections import Counter

from ci.evidence.model import FILE_CASE, Case, Results
from ci.reporter.escape import (
    clip,
    escape_block,
    escape_inline,
    escape_name,
    safe_clip,
)
from ci.reporter.pr_states import BODY_LIMIT, DEFAULT_SLOT, MISSING_LABEL

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
_EXCERPT_CHARS = 1200
_MORE_LINE = 60  # room for each "... N more" line of a shortened comment
# The side whose failure a case's log excerpt shows.
_EXCERPT_SIDE = {
    "broken": "change",
    "flaky": "change",
    "regression": "unmodified",
    "not-reproduced": "unmodified",
    "masked-by-retry": "unmodified",
}
# The log excerpts' fold around them: the lines that open and close it, one newline each.
_DETAILS = ("", "<details><summary>Log excerpts</summary>", "", "</details>")
_DETAILS_CHARS = sum(len(line) + 1 for line in _DETAILS)
ENV_CHARS = 2000  # the environment line comes from the runner: bounded like any input


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
    """suite -> (state, description <= 140 chars) for one commit status per suite."""
    statuses = {}
    for suite, cases in results.suites().items():
        broken = [c for c in cases if c.kind == "broken"]
        state = "failure" if broken or results.verdict == "failed" else "success"
        counts = Counter(case.kind for case in cases)
        text = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no cases ran"
        if broken:
            text = f"{len(broken)} failing with the change; " + text
        if counts["not-reproduced"]:
            text += "; does not reproduce the bug"
        if counts["masked-by-retry"] or counts["flaky"] or counts["unproven"]:
            text = f"{retry_note(cases)}; " + text
        statuses[suite] = (state, clip(f"A/B {results.backend}: {text}", STATUS_LIMIT))
    return statuses


def retry_note(cases) -> str | None:
    """What the retries hid, in words (None when no test passed only on a retry): the CI
    States slot, a status and the check run's title say it."""
    counts = Counter(case.kind for case in cases)
    parts = []
    if counts["masked-by-retry"]:
        parts.append(
            f"{counts['masked-by-retry']} masked by retry (upstream's CI would pass "
            f"{'it' if counts['masked-by-retry'] == 1 else 'them'} on the unmodified code)"
        )
    if counts["flaky"]:
        parts.append(f"{counts['flaky']} flaky with the change (passed only on a retry)")
    if counts["unproven"]:
        parts.append(f"{counts['unproven']} not proven (passed, attempts not seen)")
    return "; ".join(parts) or None


def cell(case: Case, mode: str) -> str:
    outcome = case.modes.get(mode)
    if outcome is None or outcome.outcome == "missing":
        return "\u2014"
    word = {"pass": "Pass", "fail": "Fail", "error": "Error", "skip": "Skip"}[outcome.outcome]
    if outcome.passed_on_retry:
        word = f"Fail, then Pass on retry ({len(outcome.attempts)} attempts)"
    elif outcome.unproven:
        word = "Pass, attempts not seen"
    if outcome.peak_mib is not None and outcome.outcome != "skip":
        word += f" \u00b7 peak {outcome.peak_mib:.1f} MiB"
    return word


def environment_line(environment: dict, backend: str = "cuda") -> str:
    """The runner's environment in one line, naming the device the tests ran on: the GPUs and
    CUDA of a CUDA run; "CPU" for a CPU run, whatever CUDA build torch carries or GPUs the
    machine has (``ci run --backend cpu``). A record of any other shape shows what it can."""
    env = _mapping(environment)
    modes = _mapping(env.get("modes"))
    change = _mapping(modes.get("change"))
    probe = change or _mapping(next(iter(modes.values()), {}))
    on_cuda = backend != "cpu"
    parts = [] if on_cuda else ["CPU"]
    for gpu in _sequence(env.get("gpus")) if on_cuda else ():
        gpu = _mapping(gpu)
        parts.append(f"{gpu.get('name')} (driver {gpu.get('driver')})")
    if probe.get("torch"):
        parts.append(f"torch {probe['torch']}")
    if on_cuda:
        parts.append(f"CUDA {probe['cuda']}" if probe.get("cuda") else "no CUDA")
    if probe.get("sglang"):
        parts.append(f"sglang {probe['sglang']}")
    for mode, info in modes.items():
        for record in _sequence(_mapping(info).get("overlay")):
            record = _mapping(record)
            parts.append(f"overlay {record.get('patch')} {record.get('state')} ({mode})")
    ci_env = env.get("upstream_ci")
    if isinstance(ci_env, dict):
        settings = ", ".join(f"{k}={v}" for k, v in list(ci_env.items())[:8])
        parts.append(f"as sglang's CI runs it ({settings})")
    elif "upstream_ci" in env:
        parts.append("outside sglang's CI (no SGLANG_IS_IN_CI: no retries)")
    git = _mapping(env.get("git"))
    if git.get("commit"):
        parts.append(f"commit {str(git['commit'])[:12]}" + (" (dirty)" if git.get("dirty") else ""))
    if probe.get("python"):
        parts.append(f"Python {probe['python']}")
    return " \u00b7 ".join(escape_inline(p) for p in parts)


def what_ran(results: Results) -> str:
    """The heading's name for the files that ran: the registered tests, the one file, or how
    many (a CPU demo runs only the project's CPU proof)."""
    paths = [file.path for file in results.files]
    if paths and all(p.startswith("test/registered/") for p in paths):
        return "the registered tests"
    if len(paths) == 1:
        return safe_clip(escape_inline(paths[0]), 120)
    return f"{len(paths)} test files"


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _sequence(value) -> list:
    return value if isinstance(value, list) else []


def comment(results, slot, run_id=None, run_url=None, artifacts_url=None, limit=BODY_LIMIT) -> str:
    """The sticky evidence comment, at most ``limit`` characters, shortened only in whole pieces.

    Everything fits: the full report. Otherwise the heading, the summary, the table header, the
    environment line, the links and a note saying what was left out always stay; flagged-file
    lines, table rows and log excerpts are then added whole, in that order, while they fit. A
    piece is a line or a fenced block, so a cut never lands inside an entity, a row or a fence.
    """
    head, all_flags, header, all_rows, tail = _parts(results, slot, run_id, run_url, artifacts_url)

    def assemble(flags, rows, excerpts, note=None) -> str:
        lines = [*head, *([*flags, ""] if flags else []), *header, *rows, *tail]
        if note:
            lines += ["", note]
        if excerpts:
            lines += [*_DETAILS[:-1], *excerpts, _DETAILS[-1]]
        return "\n".join(lines) + "\n"

    # The excerpts are built one by one, only while the whole report still fits.
    excerpts, room = [], limit - len(assemble(all_flags, all_rows, [])) - _DETAILS_CHARS
    for excerpt in _excerpts(results, _EXCERPT_CHARS):
        room -= len(excerpt) + 1
        if room < 0:
            break
        excerpts.append(excerpt)
    else:
        text = assemble(all_flags, all_rows, excerpts)
        if len(text) <= limit:
            return text
    where = artifacts_url or run_url
    where = f"[the artifacts]({_url(where)})" if where else "the run's artifacts"
    # Room for the longest note (the real one is shorter) and the two "more" lines.
    fixed = len(assemble([], [], [], "x" * 200)) + len(where) + 2 * _MORE_LINE
    if fixed > limit:
        raise ValueError(f"the comment's fixed part alone exceeds {limit} characters")
    flags, room = _take(all_flags, limit - fixed)
    rows, room = _take(all_rows, room)
    # Shortened: shorter excerpts, so that more of them fit after every row has.
    excerpts, _ = _take(_excerpts(results, 300), room - _DETAILS_CHARS)
    more_flags, more_rows = len(all_flags) - len(flags), len(all_rows) - len(rows)
    dropped = (("flagged-file lines", more_flags), ("table rows", more_rows))
    left_out = ", ".join(f"{n} {what}" for what, n in dropped if n)
    what = f"{left_out} and log excerpts" if left_out else "log excerpts"
    note = (
        f"_Shortened to fit GitHub's comment limit ({what} left out); the full report is "
        f"report.md in {where}._"
    )
    if more_flags:
        flags.append(f"\u2026 {more_flags} more flagged files")
    if more_rows:
        rows.append(f"| \u2026 {more_rows} more cases | | | |")
    return assemble(flags, rows, excerpts, note)


def not_run_lines(results, shown: int = 20) -> list:
    """One line per selected file that did not run on this backend, and why (the runner's
    ``selection.not_run``; an artifact's, so every value is checked and escaped)."""
    entries = results.selection.get("not_run")
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    lines = [
        f"Not run on {escape_inline(results.backend)}: {safe_clip(escape_name(e.get('file')), 300)} "
        f"({safe_clip(escape_inline(e.get('why')), 100)})"
        for e in entries[:shown]
        if isinstance(e.get("file"), str) and isinstance(e.get("why"), str)
    ]
    return [*lines, ""] if lines else []


def _parts(results, slot, run_id, run_url, artifacts_url) -> tuple:
    """(heading and summary, flagged-file lines, table header, table rows, the lines after)."""
    head = [
        comment_marker(slot),
        f"### {STATES[overall_state(results)]} A/B of {what_ran(results)} on "
        + safe_clip(escape_inline(results.backend), 40),
        "",
        _summary_sentence(results),
        "",
    ]
    flags = [
        f":warning: {safe_clip(escape_name(file.path), 300)}: "
        f"**{safe_clip(escape_inline(flag), 200)}**"
        for file in results.files
        for flag in file.flags
    ]
    rows = []
    for case in results.cases:
        name = case.test if case.test != FILE_CASE else f"{case.file} {FILE_CASE}"
        rows.append(
            f"| {safe_clip(escape_name(name), 300)} | {case.kind} | "
            f"{cell(case, 'unmodified')} | {cell(case, 'change')} |"
        )
    environment = environment_line(results.environment, results.backend)
    tail = ["", *not_run_lines(results), f"Environment: {safe_clip(environment, ENV_CHARS)}"]
    links = []
    if run_url:
        label = f"Run #{safe_clip(escape_inline(run_id), 40)}" if run_id else "run"
        links.append(f"[{label}]({_url(run_url)})")
    if artifacts_url:
        links.append(f"[results.json, report.md, JUnit and logs]({_url(artifacts_url)})")
    if links:
        tail.append("Artifacts: " + " \u00b7 ".join(links))
    if results.pictures:
        names = ", ".join(escape_inline(p) for p in results.pictures.values())
        where = f"[the artifacts]({_url(artifacts_url)})" if artifacts_url else "the artifacts"
        tail.append(
            f"Memory pictures (unmodified vs this change, per regression case) in {where}: "
            + safe_clip(names, 1500)
        )
    header = [
        f"| Case | Kind | {_side(results, 'unmodified')} | {_side(results, 'change')} |",
        "| --- | --- | --- | --- |",
    ]
    return head, flags, header, rows, tail


def _take(pieces: list, room: int) -> tuple[list, int]:
    """The leading pieces that fit in ``room`` characters (a newline each), and the room left."""
    taken = []
    for piece in pieces:
        if len(piece) + 1 > room:
            break
        taken.append(piece)
        room -= len(piece) + 1
    return taken, room


def _side(results: Results, mode: str) -> str:
    return safe_clip(escape_inline(results.label(mode)), 100) if mode in results.modes else mode


def _summary_sentence(results: Results) -> str:
    counts = results.counts()
    unmodified, change = _side(results, "unmodified"), _side(results, "change")
    phrases = (
        ("regression", "regression case", f"fail on {unmodified} and pass on {change}"),
        ("preservation", "preservation case", "pass both ways"),
        ("not-reproduced", "regression case", "do not reproduce the bug"),
        ("broken", "case", f"fail on {change}"),
        (
            "masked-by-retry",
            "case",
            f"fail on {unmodified} at first and pass on the retry: masked by retry, upstream's "
            f"CI would pass them there",
        ),
        ("flaky", "case", f"fail on {change} at first and pass on the retry: flaky"),
        (
            "unproven",
            "case",
            "pass where the runner could not count their attempts: not proven",
        ),
    )
    parts = [f"{_n(counts[kind], noun)} {what}" for kind, noun, what in phrases if counts[kind]]
    parts += [f"{counts[kind]} {kind}" for kind in ("skipped", "no-baseline") if counts[kind]]
    sentence = ("; ".join(parts) or "No cases ran") + "."
    reasons = [safe_clip(escape_inline(r), 300) for r in results.reasons]
    return " ".join([sentence, *(f"**{r}**" for r in reasons)])


def _n(count: int, noun: str) -> str:
    return f"**{count}** {noun}{'' if count == 1 else 's'}"


def _excerpts(results: Results, chars: int):
    """One whole block per case worth showing, a bold name line and a fenced excerpt, made as
    the caller takes them (a results.json may hold 10,000 cases)."""
    sides = {mode: _side(results, mode) for mode in set(_EXCERPT_SIDE.values())}
    for case in results.cases:
        mode = _EXCERPT_SIDE.get(case.kind)
        outcome = case.modes.get(mode) if mode else None  # an artifact may leave a mode out
        shown = outcome is not None and (
            outcome.outcome in ("fail", "error") or outcome.passed_on_retry
        )
        if not shown or not outcome.detail:
            continue
        text = outcome.detail
        if len(text) > chars:
            text = "[...]\n" + text[-chars:]
        name = safe_clip(escape_name(case.test), 300)
        yield f"**{name}** ({sides[mode]})\n\n{escape_block(text)}\n"


def write_full_report(results: Results, out: str) -> None:
    """report.md: the whole report, never shortened, for the artifact."""
    with open(os.path.join(out, "report.md"), "w", encoding="utf-8", errors="replace") as handle:
        handle.write(comment(results, DEFAULT_SLOT, limit=10**9))


def _url(url) -> str:
    # A URL goes inside (...) : spaces and parentheses would end it.
    return str(url).replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C")
