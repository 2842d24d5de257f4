"""The PR-body "CI States" block (upstream's: one ``Label: <!-- slot:NAME:start -->TEXT<!--
slot:NAME:end -->`` line per writer): our slot's text in, every other byte kept. Markers count
only where CommonMark reads them as HTML, never in the author's code or quotes."""

import bisect
import re

DEFAULT_SLOT = "dsv4-workspace"
DEFAULT_LABEL = "Latest PR Test (DSV4 workspace)"

BLOCK_START = "<!-- pr-states:start -->"
BLOCK_END = "<!-- pr-states:end -->"
BLOCK_TITLE = "### CI States"
BODY_LIMIT = 65536  # GitHub's limit for issue, PR and comment bodies
MISSING_LABEL = ":x: **Missing `run-ci` label** -- add it to run CI tests."
_SLOT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def markers(slot: str) -> tuple[str, str]:
    if not _SLOT_NAME.fullmatch(slot):
        raise ValueError(f"slot name {slot!r}: use letters, digits, '.', '_' and '-'")
    return f"<!-- slot:{slot}:start -->", f"<!-- slot:{slot}:end -->"


def slot_line(slot: str, label: str, text: str) -> str:
    for what, value in (("label", label), ("slot text", text)):
        if re.search(r"[\r\n]|<!--|-->", value):
            raise ValueError(f"{what} must be one line without HTML comments: {value[:80]!r}")
    start, end = markers(slot)
    return f"{label}: {start}{text}{end}"


def get_slot(body: str | None, slot: str) -> str | None:
    """Our slot's text in the body's block, or None when the block or the slot is absent."""
    found = _find(body or "", slot)[1]
    return None if found is None else (body or "")[found[0] : found[1]]


def set_slot(body: str | None, slot: str, label: str, text: str) -> str:
    """The body with our slot holding ``text``; everything else byte for byte the same."""
    line = slot_line(slot, label, text)  # checks that label and text are one safe line each
    body = body or ""  # GitHub sends null for an empty PR description
    block_end, found = _find(body, slot)
    if found is not None:
        return body[: found[0]] + text + body[found[1] :]
    # GitHub keeps the author's line endings; new lines follow them.
    newline = "\r\n" if "\r\n" in body else "\n"
    if block_end is not None:
        lead = "" if body[:block_end].endswith(("\n", "\r")) else newline
        return body[:block_end] + lead + line + newline + body[block_end:]
    gap = newline * (2 - body.endswith(newline) - body.endswith(newline * 2) if body else 0)
    from ci.reporter import markdown

    fence = markdown.open_fence(body)  # closed first, or it would run over our block
    lines = [BLOCK_START, "---", BLOCK_TITLE, "", line, BLOCK_END]
    return body + gap + newline.join(([fence, ""] if fence else []) + lines)


def _find(body: str, slot: str) -> tuple:
    """(where the block's end marker starts, (first, last) offsets of our slot's text in the
    block), each None when absent. A marker counts only where CommonMark reads raw HTML
    (``markdown.raw_html``); a slot is one line."""
    from ci.reporter import markdown  # the report's dependency: `ci run` never edits a body

    pieces = markdown.raw_html(body)
    starts = [0] + [m.end() for m in markdown.LINE_END.finditer(body)]

    def find(marker: str, first: int, last: int) -> int:
        at = body.find(marker, first, last)
        while at >= 0:
            line = bisect.bisect_right(starts, at) - 1
            if any(a <= line < b and marker in html for a, b, html in pieces):
                return at
            at = body.find(marker, at + len(marker), last)
        return -1

    start = find(BLOCK_START, 0, len(body))
    end = -1 if start < 0 else find(BLOCK_END, start + len(BLOCK_START), len(body))
    if end < 0:
        return None, None
    start_marker, end_marker = markers(slot)
    at = find(start_marker, start, end)
    while at >= 0:
        first = at + len(start_marker)
        line_end = markdown.LINE_END.search(body, first, end)
        last = find(end_marker, first, line_end.start() if line_end else end)
        if last >= 0:
            return end, (first, last)
        at = find(start_marker, first, end)
    return end, None
