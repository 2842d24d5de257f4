"""The one place that knows the PR-body "CI States" block and its slots.

For editing text only: given a PR body, put our slot's text in, touching nothing else. The
block has upstream's shape (``<!-- pr-states:start -->``, a rule, ``### CI States``, one
``Label: <!-- slot:NAME:start -->TEXT<!-- slot:NAME:end -->`` line per writer,
``<!-- pr-states:end -->``). Every byte outside our slot's text is kept. It does not talk to
GitHub and does not escape: callers pass text that is already one safe line.
"""

import re

DEFAULT_SLOT = "dsv4-workspace"
DEFAULT_LABEL = "Latest PR Test (DSV4 workspace)"
REPORT_STATES = ("results", "pending", "missing-label", "stale-label", "failure", "cancelled")

BLOCK_START = "<!-- pr-states:start -->"
BLOCK_END = "<!-- pr-states:end -->"
BLOCK_TITLE = "### CI States"
BODY_LIMIT = 65536  # GitHub's limit for issue, PR and comment bodies
MISSING_LABEL = ":x: **Missing `run-ci` label** -- add it to run CI tests."
_SLOT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def markers(slot: str) -> tuple[str, str]:
    if not _SLOT_NAME.match(slot):
        raise ValueError(f"slot name {slot!r}: use letters, digits, '.', '_' and '-'")
    return f"<!-- slot:{slot}:start -->", f"<!-- slot:{slot}:end -->"


def slot_line(slot: str, label: str, text: str) -> str:
    for what, value in (("label", label), ("slot text", text)):
        if "\n" in value or "\r" in value or "<!--" in value or "-->" in value:
            raise ValueError(
                f"{what} must be one line without HTML comment markers: {value[:80]!r}"
            )
    start, end = markers(slot)
    return f"{label}: {start}{text}{end}"


def get_slot(body: str | None, slot: str) -> str | None:
    """Our slot's text in the body's block, or None when the block or the slot is absent."""
    found = _find_slot(body or "", slot)
    return None if found is None else (body or "")[found[0] : found[1]]


def set_slot(body: str | None, slot: str, label: str, text: str) -> str:
    """The body with our slot holding ``text``; everything else byte for byte the same."""
    line = slot_line(slot, label, text)  # checks that label and text are one safe line each
    body = body or ""  # GitHub sends null for an empty PR description
    found = _find_slot(body, slot)
    if found is not None:
        return body[: found[0]] + text + body[found[1] :]
    # GitHub keeps the author's line endings; new lines follow them.
    newline = "\r\n" if "\r\n" in body else "\n"
    block = _find_block(body)
    if block is not None:
        end = block[1]
        lead = "" if body[:end].endswith(("\n", "\r")) else newline
        return body[:end] + lead + line + newline + body[end:]
    if not body or body.endswith(newline * 2):
        gap = ""
    else:
        gap = newline if body.endswith(newline) else newline * 2
    new_block = newline.join([BLOCK_START, "---", BLOCK_TITLE, "", line, BLOCK_END])
    return body + gap + new_block


def _find_block(body: str) -> tuple[int, int] | None:
    """(start of the block-start marker, start of the block-end marker), outside code fences."""
    fences = _fences(body)
    start = _find_outside(body, BLOCK_START, 0, len(body), fences)
    if start < 0:
        return None
    end = _find_outside(body, BLOCK_END, start + len(BLOCK_START), len(body), fences)
    return None if end < 0 else (start, end)


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}(?=[^`]*$)|~{3,})")


def _fences(body: str) -> list[tuple[int, int]]:
    """(first, last) offsets of each fenced code block: the author's examples, not our block."""
    spans, opened, offset = [], None, 0
    for line in _LINE.findall(body):  # CommonMark's line endings only: \n, \r\n, \r
        text = line.rstrip("\r\n")
        if opened is None:
            match = _FENCE_OPEN.match(text)
            if match:
                opened = (offset, match[1])
        # The closing fence: up to 3 spaces, at least as long a run of the same character, blanks.
        elif re.fullmatch(f" {{0,3}}{opened[1][0]}{{{len(opened[1])},}}[ \t]*", text):
            spans.append((opened[0], offset + len(line)))
            opened = None
        offset += len(line)
    # An unclosed fence is left out: it would run to the end of the body, over the block we
    # append there, and every later run would append another one.
    return spans


def _find_outside(body: str, marker: str, first: int, last: int, fences) -> int:
    at = body.find(marker, first, last)
    while at >= 0 and any(a <= at < b for a, b in fences):
        at = body.find(marker, at + len(marker), last)
    return at


def _find_slot(body: str, slot: str) -> tuple[int, int] | None:
    """(first, last) offsets of our slot's text; markers outside the block do not count.

    A slot is one line: a start marker whose end marker is not on its line is the author's
    text (an unclosed marker, an example) and is skipped, so nothing between it and a later
    slot is ever taken for our text.
    """
    block = _find_block(body)
    if block is None:
        return None
    start_marker, end_marker = markers(slot)
    fences = _fences(body)
    start = _find_outside(body, start_marker, block[0], block[1], fences)
    while start >= 0:
        first = start + len(start_marker)
        line_end = min(
            (i for i in (body.find(c, first, block[1]) for c in "\r\n") if i >= 0), default=block[1]
        )
        last = body.find(end_marker, first, line_end)
        if last >= 0:
            return first, last
        start = _find_outside(body, start_marker, first, block[1], fences)
    return None
