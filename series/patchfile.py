"""Read ``git format-patch`` files: headers, touched files and hunks, as plain data.

Pure: text in, dataclasses out, no git involved. It is strict enough to call a truncated or
hand-mangled patch corrupt (with the file name and line) before git sees it, and it can rebuild
the bytes of a file the patch adds. It is not a patch applier: applying is git's job.
"""

import re
from dataclasses import dataclass, field

_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_DIFF_RE = re.compile(rb"^diff --git a/(\S+) b/(\S+)$")
_SUBJECT_TAG_RE = re.compile(r"^\[PATCH[^\]]*\]\s*")
_NO_NEWLINE = b"\\ No newline at end of file"


class PatchFormatError(ValueError):
    """The patch text is not a well-formed format-patch; the message names file and line."""


@dataclass(frozen=True)
class Hunk:
    index: int  # 1-based within its file, as git and quilt count them
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: str  # the function/class context git prints after the second @@
    lines: tuple  # raw body lines (bytes, without the line ending)

    def describe(self) -> str:
        where = f" ({self.section.strip()})" if self.section.strip() else ""
        return f"hunk #{self.index} @@ -{self.old_start},{self.old_len} @@{where}"


@dataclass(frozen=True)
class FileDiff:
    old_path: str
    new_path: str
    new_file: bool = False
    deleted: bool = False
    binary: bool = False
    hunks: tuple = ()

    @property
    def path(self) -> str:
        return self.old_path if self.deleted else self.new_path


@dataclass(frozen=True)
class Patch:
    name: str
    author: str
    subject: str
    body: str
    files: tuple = field(default=())

    def file(self, path: str) -> FileDiff:
        for diff in self.files:
            if path in (diff.old_path, diff.new_path):
                return diff
        raise KeyError(f"{self.name} does not touch {path}")


def parse_patch(data: bytes, name: str = "<patch>") -> Patch:
    """Parse one ``git format-patch`` file (mbox header, message, diff)."""
    lines = data.split(b"\n")
    if not lines or not lines[0].startswith(b"From "):
        raise PatchFormatError(f"{name}:1: not a git format-patch file (no 'From ' line)")
    headers, at = _read_headers(lines, name)
    if "subject" not in headers:
        raise PatchFormatError(f"{name}: no Subject header")
    first_diff = next(
        (i for i in range(at, len(lines)) if lines[i].startswith(b"diff --git ")), None
    )
    if first_diff is None:
        raise PatchFormatError(f"{name}: no 'diff --git' section")
    message = b"\n".join(lines[at:first_diff]).decode("utf-8", "replace")
    body = message.split("\n---\n", 1)[0].strip()  # the diffstat follows the '---' line
    files = _read_files(lines, first_diff, name)
    subject = _SUBJECT_TAG_RE.sub("", headers["subject"])
    return Patch(
        name=name, author=headers.get("from", ""), subject=subject, body=body, files=tuple(files)
    )


def _read_headers(lines, name):
    headers, key, i = {}, None, 1
    while i < len(lines) and lines[i] != b"":
        text = lines[i].decode("utf-8", "replace")
        if text[:1] in (" ", "\t") and key:  # RFC 2822 folded header
            headers[key] += " " + text.strip()
        elif ":" in text:
            key, value = text.split(":", 1)
            key = key.strip().lower()
            headers[key] = value.strip()
        else:
            raise PatchFormatError(f"{name}:{i + 1}: malformed mail header {text!r}")
        i += 1
    return headers, i + 1


def _read_files(lines, i, name):
    files = []
    while i < len(lines):
        match = _DIFF_RE.match(lines[i])
        if not match:
            if lines[i] == b"-- ":  # format-patch signature: the diff is over
                break
            if lines[i].strip():
                raise PatchFormatError(f"{name}:{i + 1}: unexpected line {lines[i][:60]!r}")
            i += 1
            continue
        old_path, new_path = (p.decode() for p in match.groups())
        flags = {"new_file": False, "deleted": False, "binary": False}
        i += 1
        while i < len(lines) and not lines[i].startswith((b"@@", b"diff --git ", b"-- ")):
            line = lines[i]
            flags["new_file"] |= line.startswith(b"new file mode")
            flags["deleted"] |= line.startswith(b"deleted file mode")
            flags["binary"] |= line.startswith((b"Binary files", b"GIT binary patch"))
            if line == b"" and i + 1 < len(lines) and lines[i + 1] == b"-- ":
                break
            i += 1
        hunks = []
        while i < len(lines) and lines[i].startswith(b"@@"):
            hunk, i = _read_hunk(lines, i, len(hunks) + 1, name)
            hunks.append(hunk)
        if not hunks and not flags["binary"] and not flags["deleted"] and not flags["new_file"]:
            if old_path == new_path:
                raise PatchFormatError(f"{name}: {new_path} has a diff header but no hunks")
        files.append(FileDiff(old_path, new_path, hunks=tuple(hunks), **flags))
    return files


def _read_hunk(lines, i, index, name):
    match = _HUNK_RE.match(lines[i])
    if not match:
        raise PatchFormatError(f"{name}:{i + 1}: malformed hunk header {lines[i][:60]!r}")
    old_start, old_len, new_start, new_len, section = match.groups()
    old_len = 1 if old_len is None else int(old_len)
    new_len = 1 if new_len is None else int(new_len)
    header_line = i + 1
    i += 1
    body, old_seen, new_seen = [], 0, 0
    while old_seen < old_len or new_seen < new_len:
        if i >= len(lines):
            raise PatchFormatError(
                f"{name}:{header_line}: hunk #{index} is truncated "
                f"(expected -{old_len}/+{new_len} lines, got -{old_seen}/+{new_seen})"
            )
        line = lines[i]
        tag = line[:1]
        if tag == b" " or line == b"":  # some mailers strip the space of an empty context line
            old_seen, new_seen = old_seen + 1, new_seen + 1
        elif tag == b"-":
            old_seen += 1
        elif tag == b"+":
            new_seen += 1
        elif line == _NO_NEWLINE:
            pass
        else:
            raise PatchFormatError(
                f"{name}:{i + 1}: hunk #{index} has a line that is not context, '-' or '+': "
                f"{line[:60]!r}"
            )
        body.append(line)
        i += 1
    if i < len(lines) and lines[i] == _NO_NEWLINE:
        body.append(lines[i])
        i += 1
    if old_seen != old_len or new_seen != new_len:
        raise PatchFormatError(f"{name}:{header_line}: hunk #{index} line counts do not match")
    hunk = Hunk(
        index,
        int(old_start),
        old_len,
        int(new_start),
        new_len,
        section.decode("utf-8", "replace"),
        tuple(body),
    )
    return hunk, i


def added_file_bytes(diff: FileDiff) -> bytes:
    """The exact bytes of a file that ``diff`` creates."""
    if not diff.new_file or diff.binary:
        raise ValueError(f"{diff.new_path} is not a text file this patch adds")
    out = []
    for line in (line for hunk in diff.hunks for line in hunk.lines):
        if line == _NO_NEWLINE:
            out[-1] = out[-1][:-1]
        else:
            out.append(line[1:] + b"\n")
    return b"".join(out)


def hunk_at(diff: FileDiff, old_line: int):
    """The hunk git means by 'patch failed: FILE:LINE' (LINE is the hunk's old start)."""
    for hunk in diff.hunks:
        if hunk.old_start == old_line:
            return hunk
    # git may report a line inside the hunk after an offset search; take the nearest start.
    earlier = [hunk for hunk in diff.hunks if hunk.old_start <= old_line]
    return earlier[-1] if earlier else (diff.hunks[0] if diff.hunks else None)
