"""Pure rendering: the results model in, markdown and short strings out.

For text only: no I/O, no GitHub, no clock. It renders the evidence comment (case x {Unmodified
main, This change}), the PR-body slot text, and one commit-status description per suite. It is
also the one place that escapes untrusted text (test names, log excerpts) so that nothing from a
test can break the markdown, a table, or the hidden markers the publisher searches for.
"""

import re

from ci.pr_body import BODY_LIMIT, MISSING_LABEL
from ci.results import FILE_CASE, FLAG_NOT_REPRODUCED, Case, Results

STATUS_LIMIT = 140
STATES = {
    "success": ":white_check_mark:",
    "failure": ":x:",
    "not-reproduced": ":warning:",
    "pending": ":hourglass_flowing_sand:",
}
# Only what can act mid-line: the text never starts a line, where '#', '-' or '+' would matter.
_MD_PUNCT = re.compile(r"([\\`*_\[\]|~])")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CONTROL = {c: None for c in range(32) if c not in (9, 10)}
_EXCERPT_CHARS = 1200


def comment_marker(slot: str) -> str:
    """The hidden line that finds our sticky comment again on reruns."""
    return f"<!-- sglang-overlay-ci:{slot} -->"


def escape_inline(text) -> str:
    """One line of plain text, safe in a table cell, a heading or a link text."""
    text = _ANSI.sub("", str(text)).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    text = text.translate(_CONTROL)
    # Entities first, so '<!--' and '-->' can never reach GitHub as comment markers.
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_PUNCT.sub(r"\\\1", text)
    return text.replace("@", "&#64;")  # no accidental mentions from test names


def escape_block(text) -> str:
    """Log text for a fenced code block: markers defused, fence chosen longer than any run."""
    text = _ANSI.sub("", str(text)).replace("\r\n", "\n").translate(_CONTROL)
    # Inside a fence entities are not decoded, so a zero-width space defuses the markers.
    text = text.replace("<!--", "<\u200b!--").replace("-->", "--\u200b>")
    longest = max((len(run) for run in re.findall(r"`+|~+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def overall_state(results: Results) -> str:
    if not results.change_ok():
        return "failure"
    if any(FLAG_NOT_REPRODUCED in f.flags for f in results.files) or any(
        c.kind == "not-reproduced" for c in results.cases
    ):
        return "not-reproduced"
    return "success"


def slot_text(state: str, run_id=None, run_url=None, artifacts_url=None, note=None) -> str:
    """One line for the PR-body slot: a state emoji, then a link to the run when there is one."""
    if state == "missing-label":
        return MISSING_LABEL
    parts = [STATES[state]]
    if run_id and run_url:
        parts.append(f"[Run #{escape_inline(run_id)}]({_url(run_url)})")
    elif run_url or artifacts_url:
        parts.append(f"[results]({_url(run_url or artifacts_url)})")
    if note:
        parts.append("-- " + escape_inline(note))
    return " ".join(parts)


def short_summary(results: Results) -> str:
    counts = results.counts()
    words = [f"{n} {kind}" for kind, n in counts.items() if n]
    return ", ".join(words) or "no cases"


def status_descriptions(results: Results) -> dict:
    """suite -> (state, description <= 140 chars) for one commit status per suite."""
    statuses = {}
    for suite, cases in results.suites().items():
        broken = [c for c in cases if c.kind == "broken"]
        state = "failure" if broken or not results.change_ok() else "success"
        counts: dict = {}
        for case in cases:
            counts[case.kind] = counts.get(case.kind, 0) + 1
        text = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no cases ran"
        if broken:
            text = f"{len(broken)} failing with the change; " + text
        if any(c.kind == "not-reproduced" for c in cases):
            text += "; does not reproduce the bug"
        statuses[suite] = (state, clip(f"A/B {results.backend}: {text}", STATUS_LIMIT))
    return statuses


def cell(case: Case, mode: str) -> str:
    outcome = case.modes.get(mode)
    if outcome is None or outcome.outcome == "missing":
        return "\u2014"
    oom = any(e.get("outcome") == "oom" for e in outcome.evidence)
    word = {"pass": "Pass", "fail": "Fail", "error": "Error", "skip": "Skip"}[outcome.outcome]
    if outcome.outcome in ("fail", "error") and oom:
        word = "OOM"
    if outcome.peak_mib is not None:
        word += f" \u00b7 peak {outcome.peak_mib:.1f} MiB"
    elif outcome.budget_mib is not None and outcome.outcome != "skip":
        word += f" \u00b7 cap {outcome.budget_mib:g} MiB"
    return word


def environment_line(environment: dict) -> str:
    parts = []
    for gpu in environment.get("gpus") or []:
        parts.append(f"{gpu.get('name')} (driver {gpu.get('driver')})")
    change = (environment.get("modes") or {}).get("change") or {}
    probe = change or next(iter((environment.get("modes") or {}).values()), {})
    if probe.get("torch"):
        parts.append(f"torch {probe['torch']}")
    parts.append(f"CUDA {probe['cuda']}" if probe.get("cuda") else "no CUDA")
    if probe.get("sglang"):
        parts.append(f"sglang {probe['sglang']}")
    for mode, info in (environment.get("modes") or {}).items():
        for record in (info or {}).get("overlay") or []:
            parts.append(f"overlay {record.get('patch')} {record.get('state')} ({mode})")
    git = environment.get("git") or {}
    if git.get("commit"):
        parts.append(f"commit {git['commit'][:12]}" + (" (dirty)" if git.get("dirty") else ""))
    if environment.get("python"):
        parts.append(f"Python {environment['python']}")
    return " \u00b7 ".join(escape_inline(p) for p in parts)


def comment(
    results: Results,
    slot: str,
    run_id=None,
    run_url=None,
    artifacts_url=None,
    limit: int = BODY_LIMIT,
) -> str:
    """The sticky evidence comment, shrunk to ``limit`` by dropping our detail, never silently."""
    for excerpt_chars, max_rows in (
        (_EXCERPT_CHARS, None),
        (300, None),
        (0, None),
        (0, 200),
        (0, 20),
    ):
        text = _comment(results, slot, run_id, run_url, artifacts_url, excerpt_chars, max_rows)
        if len(text) <= limit:
            return text
    return clip(text, limit)


def _comment(results, slot, run_id, run_url, artifacts_url, excerpt_chars, max_rows) -> str:
    state = overall_state(results)
    lines = [
        comment_marker(slot),
        f"### {STATES[state]} DSV4 sparse-prefill workspace: A/B on {escape_inline(results.backend)}",
        "",
        _summary_sentence(results),
        "",
    ]
    for file in results.files:
        for flag in file.flags:
            lines.append(f":warning: {escape_inline(file.path)}: **{escape_inline(flag)}**")
    if any(f.flags for f in results.files):
        lines.append("")
    lines += ["| Case | Kind | Unmodified main | This change |", "| --- | --- | --- | --- |"]
    shown = results.cases if max_rows is None else results.cases[:max_rows]
    for case in shown:
        name = case.case_id if case.case_id != FILE_CASE else f"{case.file} {FILE_CASE}"
        lines.append(
            f"| {escape_inline(name)} | {case.kind} | {cell(case, 'unmodified')} | "
            f"{cell(case, 'change')} |"
        )
    truncated = len(shown) < len(results.cases) or excerpt_chars < _EXCERPT_CHARS
    if len(shown) < len(results.cases):
        lines.append(f"| \u2026 {len(results.cases) - len(shown)} more cases | | | |")
    lines += ["", f"Environment: {environment_line(results.environment)}"]
    links = []
    if run_url:
        label = f"Run #{escape_inline(run_id)}" if run_id else "run"
        links.append(f"[{label}]({_url(run_url)})")
    if artifacts_url:
        links.append(f"[results.json, JUnit and logs]({_url(artifacts_url)})")
    if links:
        lines.append("Artifacts: " + " \u00b7 ".join(links))
    if truncated:
        where = (
            f"[the artifacts]({_url(artifacts_url or run_url)})"
            if (artifacts_url or run_url)
            else "the run's artifacts"
        )
        lines.append(f"\n_Shortened to fit GitHub's comment limit; full logs are in {where}._")
    if excerpt_chars:
        excerpts = _excerpts(results, excerpt_chars)
        if excerpts:
            lines += ["", "<details><summary>Log excerpts</summary>", "", *excerpts, "</details>"]
    return "\n".join(lines) + "\n"


def _summary_sentence(results: Results) -> str:
    counts = results.counts()
    parts = []
    if counts["regression"]:
        parts.append(
            f"{_n(counts['regression'], 'regression case')} fail on unmodified main and pass "
            "with this change"
        )
    if counts["preservation"]:
        parts.append(f"{_n(counts['preservation'], 'preservation case')} pass both ways")
    if counts["not-reproduced"]:
        parts.append(f"{_n(counts['not-reproduced'], 'regression case')} do not reproduce the bug")
    if counts["broken"]:
        parts.append(f"{_n(counts['broken'], 'case')} fail with this change")
    for kind in ("skipped", "no-baseline"):
        if counts[kind]:
            parts.append(f"{counts[kind]} {kind}")
    return ("; ".join(parts) or "No cases ran") + "."


def _n(count: int, noun: str) -> str:
    return f"**{count}** {noun}{'' if count == 1 else 's'}"


def _excerpts(results: Results, chars: int) -> list[str]:
    out = []
    for case in results.cases:
        mode = {"broken": "change", "regression": "unmodified", "not-reproduced": "unmodified"}.get(
            case.kind
        )
        if mode is None or not case.modes[mode].excerpt:
            continue
        text = case.modes[mode].excerpt
        if len(text) > chars:
            text = "[...]\n" + text[-chars:]
        out += [f"**{escape_inline(case.case_id)}** ({mode})", "", escape_block(text), ""]
    return out


def _url(url) -> str:
    # A URL goes inside (...) : spaces and parentheses would end it.
    return str(url).replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C")
