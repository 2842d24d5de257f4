"""Turn git's complaints about a patch that does not apply into "patch, file, hunk" messages.

Pure: git's output text and the parsed patches in, one readable paragraph out. Not for
running git.
"""

import re

from series.patchfile import hunk_at

_FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
_MISSING = re.compile(r"^error: (.+?): (does not exist in index|No such file or directory)$", re.M)
_EXISTS = re.compile(r"^error: (.+?): already exists in (index|working directory)$", re.M)
_AM_PATCH = re.compile(r"^Patch failed at (\d+) ", re.M)


def failing_patch_index(am_output: str):
    """0-based index in the am session of the patch git am stopped at, or None."""
    match = _AM_PATCH.search(am_output)
    return int(match.group(1)) - 1 if match else None


def explain(output: str, patch, prefix: str = "") -> list:
    """One line per problem git reported for ``patch`` (a parsed patchfile.Patch).

    ``prefix`` turns the paths git printed back into upstream paths when git ran with the
    upstream prefix stripped (``python/sglang/`` for an installed package).
    """
    problems = []
    for path, line in _FAILED_AT.findall(output):
        path = prefix + path
        try:
            hunk = hunk_at(patch.file(path), int(line))
        except KeyError:
            hunk = None
        where = hunk.describe() if hunk else f"the hunk at line {line}"
        problems.append(f"{patch.name}: {path}: {where} does not apply")
    for path, _ in _MISSING.findall(output):
        problems.append(f"{patch.name}: {prefix + path}: the file does not exist in the target")
    for path, _ in _EXISTS.findall(output):
        problems.append(
            f"{patch.name}: {prefix + path}: the file it adds already exists in the target"
        )
    if not problems:
        detail = next(
            (ln for ln in output.splitlines() if ln.startswith(("error:", "fatal:"))),
            output.strip().splitlines()[-1] if output.strip() else "no output",
        )
        problems.append(f"{patch.name}: does not apply ({detail})")
    return problems


def first_difference(expected: bytes, actual: bytes) -> str:
    """Where two files first differ, as 'line N' (or which one is shorter)."""
    a_lines, b_lines = expected.splitlines(keepends=True), actual.splitlines(keepends=True)
    for number, (a, b) in enumerate(zip(a_lines, b_lines, strict=False), 1):
        if a != b:
            return f"line {number}"
    if len(a_lines) != len(b_lines):
        return f"line {min(len(a_lines), len(b_lines)) + 1} (one file is longer)"
    return "the final newline"
