"""Pure rendering: the evidence in, markdown and short strings out.

For text only: no I/O, no GitHub, no clock. It renders the evidence comment (each case on the
two sides the run compared, named by what each ran: "sglang 0.5.23" and "sglang 0.5.23 + this
change", or two commits), the PR-body slot text, and one commit-status description per suite.
It is also the one place that escapes untrusted text (test names, log excerpts) so that nothing
from a test can break the markdown, a table, or the hidden markers the publisher searches for.
"""

import os
import re
from dataclasses import dataclass

from evidence.model import FILE_CASE, Case, Results
from report.pr_states import BODY_LIMIT, MISSING_LABEL

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
# Only what can act mid-line: the text never starts a line, where '#', '-' or '+' would matter.
_MD_PUNCT = re.compile(r"([\\`*_\[\]|~])")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Control characters (C0 but tab and newline, DEL, C1) and every format character (Unicode Cf:
# bidi overrides and isolates, zero-width spaces and joiners, BOM, tag characters): invisible
# text that can reorder what a reader sees or split a marker the publisher searches for. And
# lone surrogates (JSON's "\ud800" decodes to one), which no UTF-8 writer accepts.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891"
    "\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f\ud800-\udfff]"
)
_LINE_BREAKS = re.compile("\r\n|[\n\r\u2028\u2029]")
# GitHub finds mentions, issue references and bare links in the rendered text, after entities
# are decoded; a word joiner (never in the input: it is a format character) breaks each one.
_ACTS_ON_GITHUB = re.compile(r"(@|#|(?<![A-Za-z0-9])GH-|:(?=//)|(?<![A-Za-z0-9])www(?=\.))", re.I)
_EXCERPT_CHARS = 1200
ENV_CHARS = 2000  # the environment line comes from the runner: bounded like any input


def comment_marker(slot: str) -> str:
    """The hidden line that finds our sticky comment again on reruns."""
    return f"<!-- sglang-overlay-ci:{slot} -->"


def escape_inline(text) -> str:
    """One line of plain text, safe in a table cell, a heading or a link text."""
    text = _INVISIBLE.sub("", _LINE_BREAKS.sub(" ", _ANSI.sub("", str(text))))
    # Entities first, so '<!--' and '-->' can never reach GitHub as comment markers.
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_PUNCT.sub(r"\\\1", text)
    return _ACTS_ON_GITHUB.sub("\\1\u2060", text)  # no mentions, references or links


def visible(text) -> str:
    """Plain text (a check-run annotation) without control or invisible format characters."""
    return _INVISIBLE.sub("", _ANSI.sub("", str(text)).replace("\r\n", "\n"))


def escape_block(text) -> str:
    """Log text for a fenced code block: markers defused, fence chosen longer than any run."""
    text = _ANSI.sub("", str(text)).replace("\r\n", "\n").replace("\r", "\n")
    text = _INVISIBLE.sub("", text.replace("\u2028", "\n").replace("\u2029", "\n"))
    # Inside a fence entities are not decoded, so a zero-width space defuses the markers.
    text = text.replace("<!--", "<\u200b!--").replace("-->", "--\u200b>")
    longest = max((len(run) for run in re.findall(r"`+|~+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


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


def short_summary(results: Results) -> str:
    counts = results.counts()
    words = [f"{n} {kind}" for kind, n in counts.items() if n]
    return ", ".join(words) or "no cases"


def status_descriptions(results: Results) -> dict:
    """suite -> (state, description <= 140 chars) for one commit status per suite."""
    statuses = {}
    for suite, cases in results.suites().items():
        broken = [c for c in cases if c.kind == "broken"]
        state = "failure" if broken or results.verdict == "failed" else "success"
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
    word = {"pass": "Pass", "fail": "Fail", "error": "Error", "skip": "Skip"}[outcome.outcome]
    if outcome.peak_mib is not None and outcome.outcome != "skip":
        word += f" \u00b7 peak {outcome.peak_mib:.1f} MiB"
    return word


def environment_line(environment: dict) -> str:
    """The runner's environment in one line; a record of any other shape shows what it can."""
    env = _mapping(environment)
    parts = []
    for gpu in _sequence(env.get("gpus")):
        gpu = _mapping(gpu)
        parts.append(f"{gpu.get('name')} (driver {gpu.get('driver')})")
    modes = _mapping(env.get("modes"))
    change = _mapping(modes.get("change"))
    probe = change or _mapping(next(iter(modes.values()), {}))
    if probe.get("torch"):
        parts.append(f"torch {probe['torch']}")
    parts.append(f"CUDA {probe['cuda']}" if probe.get("cuda") else "no CUDA")
    if probe.get("sglang"):
        parts.append(f"sglang {probe['sglang']}")
    for mode, info in modes.items():
        for record in _sequence(_mapping(info).get("overlay")):
            record = _mapping(record)
            parts.append(f"overlay {record.get('patch')} {record.get('state')} ({mode})")
    git = _mapping(env.get("git"))
    if git.get("commit"):
        parts.append(f"commit {str(git['commit'])[:12]}" + (" (dirty)" if git.get("dirty") else ""))
    if probe.get("python"):
        parts.append(f"Python {probe['python']}")
    return " \u00b7 ".join(escape_inline(p) for p in parts)


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _sequence(value) -> list:
    return value if isinstance(value, list) else []


def comment(
    results: Results,
    slot: str,
    run_id=None,
    run_url=None,
    artifacts_url=None,
    limit: int = BODY_LIMIT,
) -> str:
    """The sticky evidence comment, at most ``limit`` characters, shortened only in whole pieces.

    Everything fits: the full report. Otherwise the heading, the summary, the table header, the
    environment line, the links and a note saying what was left out always stay; flagged-file
    lines, table rows and log excerpts are then added whole, in that order, while they fit. A
    piece is a line or a fenced block, so a cut never lands inside an entity, a row or a fence.
    """
    parts = _parts(results, slot, run_id, run_url, artifacts_url)
    text = _assemble(parts, parts.flags, parts.rows, parts.excerpts, note=None)
    if len(text) <= limit:
        return text
    # Shortened: shorter excerpts, so that more of them fit after every row has.
    text = _fill(parts, _excerpts(results, 300), limit)
    if text is None:
        raise ValueError(f"the comment's fixed part alone exceeds {limit} characters")
    return text


@dataclass
class _Parts:
    head: list
    flags: list
    table_header: list
    rows: list
    tail: list
    excerpts: list
    where: str


def _parts(results, slot, run_id, run_url, artifacts_url) -> "_Parts":
    state = overall_state(results)
    head = [
        comment_marker(slot),
        f"### {STATES[state]} A/B of the registered tests on "
        + safe_clip(escape_inline(results.backend), 40),
        "",
        _summary_sentence(results),
        "",
    ]
    flags = [
        f":warning: {safe_clip(escape_inline(file.path), 300)}: "
        f"**{safe_clip(escape_inline(flag), 200)}**"
        for file in results.files
        for flag in file.flags
    ]
    rows = []
    for case in results.cases:
        name = case.test if case.test != FILE_CASE else f"{case.file} {FILE_CASE}"
        rows.append(
            f"| {safe_clip(escape_inline(name), 300)} | {case.kind} | "
            f"{cell(case, 'unmodified')} | {cell(case, 'change')} |"
        )
    tail = ["", f"Environment: {safe_clip(environment_line(results.environment), ENV_CHARS)}"]
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
    where = (
        f"[the artifacts]({_url(artifacts_url or run_url)})"
        if (artifacts_url or run_url)
        else "the run's artifacts"
    )
    return _Parts(
        head,
        flags,
        [
            f"| Case | Kind | {_side(results, 'unmodified')} | {_side(results, 'change')} |",
            "| --- | --- | --- | --- |",
        ],
        rows,
        tail,
        _excerpts(results, _EXCERPT_CHARS),
        where,
    )


def _fill(parts: "_Parts", excerpts: list, limit: int):
    """Greedy: the fixed part with the note, then whole flag lines, rows and excerpt blocks."""
    note = "x" * 200  # room for the longest note; the real one is shorter
    fixed = len(_assemble(parts, [], [], [], note)) + len(parts.where) + 2 * _MORE_LINE
    if fixed > limit:
        return None
    room = limit - fixed
    chosen = {"flags": [], "rows": [], "excerpts": []}
    for key, pieces in (("flags", parts.flags), ("rows", parts.rows)):
        for piece in pieces:
            if len(piece) + 1 > room:
                break
            chosen[key].append(piece)
            room -= len(piece) + 1
    wrapper = len("\n<details><summary>Log excerpts</summary>\n\n</details>") + 2
    if excerpts and room > wrapper:
        room -= wrapper
        for block in excerpts:
            if len(block) + 1 > room:
                break
            chosen["excerpts"].append(block)
            room -= len(block) + 1
    dropped = {
        "flagged-file lines": len(parts.flags) - len(chosen["flags"]),
        "table rows": len(parts.rows) - len(chosen["rows"]),
    }
    left_out = ", ".join(f"{n} {what}" for what, n in dropped.items() if n)
    what = f"{left_out} and log excerpts" if left_out else "log excerpts"
    note = (
        f"_Shortened to fit GitHub's comment limit ({what} left out); the full report is "
        f"report.md in {parts.where}._"
    )
    parts_more = _Parts(
        parts.head,
        chosen["flags"] + _more(dropped["flagged-file lines"], "flagged files", table=False),
        parts.table_header,
        chosen["rows"] + _more(dropped["table rows"], "cases", table=True),
        parts.tail,
        [],
        parts.where,
    )
    return _assemble(parts_more, parts_more.flags, parts_more.rows, chosen["excerpts"], note)


_MORE_LINE = 60


def _more(count: int, what: str, table: bool) -> list:
    if not count:
        return []
    return [f"| \u2026 {count} more {what} | | | |" if table else f"\u2026 {count} more {what}"]


def _assemble(parts: "_Parts", flags, rows, excerpts, note) -> str:
    lines = list(parts.head)
    if flags:
        lines += [*flags, ""]
    lines += [*parts.table_header, *rows, *parts.tail]
    if note:
        lines += ["", note]
    if excerpts:
        lines += ["", "<details><summary>Log excerpts</summary>", "", *excerpts, "</details>"]
    return "\n".join(lines) + "\n"


def safe_clip(escaped: str, limit: int) -> str:
    """Shorten already-escaped inline text without splitting an entity or an escape."""
    if len(escaped) <= limit:
        return escaped
    cut = escaped[: max(0, limit - 1)]
    cut = re.sub(r"&#?[A-Za-z0-9]*$", "", cut)  # a partial &amp; / &#64;
    if (len(cut) - len(cut.rstrip("\\"))) % 2:  # a lone backslash would escape the ellipsis
        cut = cut[:-1]
    return cut + "\u2026"


def _side(results: Results, mode: str) -> str:
    return safe_clip(escape_inline(results.label(mode)), 100) if mode in results.modes else mode


def _summary_sentence(results: Results) -> str:
    counts = results.counts()
    parts = []
    if counts["regression"]:
        parts.append(
            f"{_n(counts['regression'], 'regression case')} fail on "
            f"{_side(results, 'unmodified')} and pass on {_side(results, 'change')}"
        )
    if counts["preservation"]:
        parts.append(f"{_n(counts['preservation'], 'preservation case')} pass both ways")
    if counts["not-reproduced"]:
        parts.append(f"{_n(counts['not-reproduced'], 'regression case')} do not reproduce the bug")
    if counts["broken"]:
        parts.append(f"{_n(counts['broken'], 'case')} fail on {_side(results, 'change')}")
    for kind in ("skipped", "no-baseline"):
        if counts[kind]:
            parts.append(f"{counts[kind]} {kind}")
    sentence = ("; ".join(parts) or "No cases ran") + "."
    reasons = [safe_clip(escape_inline(r), 300) for r in results.reasons]
    return " ".join([sentence, *(f"**{r}**" for r in reasons)])


def _n(count: int, noun: str) -> str:
    return f"**{count}** {noun}{'' if count == 1 else 's'}"


def _excerpts(results: Results, chars: int) -> list[str]:
    """One whole block per case worth showing: a bold name line and a fenced excerpt."""
    out = []
    for case in results.cases:
        mode = {"broken": "change", "regression": "unmodified", "not-reproduced": "unmodified"}.get(
            case.kind
        )
        outcome = case.modes.get(mode) if mode else None  # an artifact may leave a mode out
        if outcome is None or outcome.outcome not in ("fail", "error") or not outcome.detail:
            continue
        text = outcome.detail
        if len(text) > chars:
            text = "[...]\n" + text[-chars:]
        name = safe_clip(escape_inline(case.test), 300)
        side = _side(results, mode)
        out.append(f"**{name}** ({side})\n\n{escape_block(text)}\n")
    return out


FULL_REPORT = "report.md"  # the untruncated report, in the results folder (the artifact)


def write_full_report(results: Results, out: str, slot: str = "dsv4-workspace") -> None:
    """report.md: the whole report, never shortened, for the artifact."""
    with open(os.path.join(out, FULL_REPORT), "w", encoding="utf-8", errors="replace") as handle:
        handle.write(comment(results, slot, limit=10**9))


def _url(url) -> str:
    # A URL goes inside (...) : spaces and parentheses would end it.
    return str(url).replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C")
