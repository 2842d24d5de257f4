"""The series' cover letter: ``0000-cover-letter.patch`` as ``git format-patch --cover-letter``
writes it.

Pure: parse the file into its subject, blurb and patch count, turn it back into the branch
description ``format-patch --cover-from-description=subject`` reads, and pin its date. The
cover letter is not a patch: ``series`` never lists it, so ``git am`` never sees it. The
subject and blurb are written by hand; the shortlog and diffstat below them are git's and
are rewritten by ``refresh``. Not for running git (``refresh`` does).
"""

import re
from dataclasses import dataclass

COVER_NAME = "0000-cover-letter.patch"
_SUBJECT_RE = re.compile(r"^\[PATCH 0/(\d+)\]\s*(.+)$")
# git's shortlog header: "Author Name (2):" after a blank line.
_SHORTLOG_RE = re.compile(r"^\S.* \(\d+\):$")
_PLACEHOLDER = "*** "


class CoverError(ValueError):
    """The cover letter is not what format-patch writes; the message names the problem."""


@dataclass(frozen=True)
class Cover:
    subject: str  # without the [PATCH 0/N] tag
    blurb: str
    count: int  # N in [PATCH 0/N]

    def description(self) -> str:
        """The branch description that makes format-patch write this subject and blurb."""
        return f"{self.subject}\n\n{self.blurb}\n"


def parse_cover(data: bytes, name: str = COVER_NAME) -> Cover:
    text = data.decode("utf-8")
    if not text.startswith("From "):
        raise CoverError(f"{name}:1: not a format-patch cover letter (no 'From ' line)")
    head, sep, body = text.partition("\n\n")
    if not sep:
        raise CoverError(f"{name}: no blank line after the mail headers")
    headers, key = {}, None
    for line in head.splitlines()[1:]:
        if line[:1] in (" ", "\t") and key:
            headers[key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            key = key.strip().lower()
            headers[key] = value.strip()
    match = _SUBJECT_RE.match(headers.get("subject", ""))
    if not match:
        raise CoverError(f"{name}: the subject must start with '[PATCH 0/N]'")
    lines = body.splitlines()
    shortlog = next(
        (
            i
            for i in range(len(lines) - 1, 0, -1)
            if _SHORTLOG_RE.match(lines[i]) and not lines[i - 1].strip()
        ),
        None,
    )
    if shortlog is None:
        raise CoverError(f"{name}: no shortlog ('Author (N):') below the blurb")
    blurb = "\n".join(lines[:shortlog]).strip()
    subject = match.group(2).strip()
    if not blurb or subject.startswith(_PLACEHOLDER) or blurb.startswith(_PLACEHOLDER):
        raise CoverError(f"{name}: the subject and blurb are still git's placeholders")
    return Cover(subject=subject, blurb=blurb, count=int(match.group(1)))


def pin_date(data: bytes, date: str) -> bytes:
    """Replace the cover letter's Date header (format-patch writes the current time)."""
    head, sep, body = data.partition(b"\n\n")
    lines = [
        b"Date: " + date.encode() if line.startswith(b"Date: ") else line
        for line in head.split(b"\n")
    ]
    return b"\n".join(lines) + sep + body
