"""The edge to the git executable: every git the series tools start goes through ``run``, and
``explain`` turns git's complaints about a patch into "patch, file, hunk" messages.
"""

import os
import re
import shutil

from ci import gitcmd
from tools.series import SeriesError, usage

# Used for commits in throwaway trees (git am during check) when nothing else is configured.
TOOL_IDENTITY = {
    "GIT_COMMITTER_NAME": "sglang-overlay tools",
    "GIT_COMMITTER_EMAIL": "tools@sglang-overlay.invalid",
}


def run(args, cwd, env=None, check=True, stdin=None, ceiling=None):
    """Run ``git *args`` in ``cwd`` (``ci.gitcmd``: in a git hook, as check runs, GIT_DIR and
    friends name the caller's repository, and a user's hooks or line-ending rewriting must not
    change what we apply or compare); raise SeriesError with git's own words on failure.
    ``ceiling`` stops git from finding a repository above it: ``git apply`` in a plain directory
    (an installed package) must not be captured by a checkout that happens to contain it."""
    _need_git()
    proc = gitcmd.run(args, cwd, env=env, stdin=stdin, ceiling=ceiling)
    if check and proc.returncode != 0:
        raise SeriesError(f"git {' '.join(args)} failed in {cwd}:\n{_decode(proc.stderr).strip()}")
    return proc


def ok(args, cwd, **kwargs) -> bool:
    return run(args, cwd, check=False, **kwargs).returncode == 0


def out(args, cwd, **kwargs) -> str:
    return _decode(run(args, cwd, **kwargs).stdout).strip()


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def text(proc) -> str:
    """stdout and stderr of a finished git run, as one string (for parsing git's messages)."""
    return _decode(proc.stdout + proc.stderr)


def _need_git() -> None:
    if shutil.which("git") is None:
        raise usage("git was not found on PATH; the series tools need git (>= 2.25)")


def is_work_tree(path) -> bool:
    _need_git()
    return gitcmd.is_top(path)


def dirty_paths(repo) -> list:
    """Tracked changes and untracked files; an operation in progress counts as dirty too."""
    paths = gitcmd.changed(repo, untracked="normal")
    if paths is None:
        raise SeriesError(f"git status failed in {repo}")
    git_dir = os.path.join(repo, out(["rev-parse", "--git-dir"], repo))
    for marker in ("rebase-apply", "rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
        if os.path.exists(os.path.join(git_dir, marker)):
            paths.append(f"(a git {marker} is in progress)")
    return paths


_FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
_MISSING = re.compile(
    r"^error: (.+?): (?:does not exist in index|No such file or directory)$", re.M
)
_EXISTS = re.compile(r"^error: (.+?): already exists in (?:index|working directory)$", re.M)
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+\S+ @@(.*)$", re.M)


def hunk_at(data: bytes, path: str, line: int):
    """The hunk of ``path`` in patch ``data`` that git means by 'patch failed: PATH:LINE',
    described; None when the patch has no hunk there. LINE is the hunk's old start, or a line
    after it when git searched at an offset: the nearest start at or before it wins."""
    section = data.partition(f"diff --git a/{path} b/{path}\n".encode())[2]
    hunks = _HUNK.findall(section.split(b"\ndiff --git ", 1)[0])
    if not hunks:
        return None
    index = max((i for i, hunk in enumerate(hunks) if int(hunk[0]) <= line), default=0)
    start, length, where = (part.decode("utf-8", "replace").strip() for part in hunks[index])
    return f"hunk #{index + 1} @@ -{start},{length or 1} @@" + (f" ({where})" if where else "")


def explain(output: str, patch, prefix: str = "") -> list:
    """One line per problem git reported for ``patch`` (a ``seriesdir.Patch``); ``prefix`` maps
    the paths git printed back to upstream paths (``python/sglang/`` for an installed package).
    """
    problems = []
    for path, line in _FAILED_AT.findall(output):
        where = hunk_at(patch.data, prefix + path, int(line)) or f"the hunk at line {line}"
        problems.append(f"{patch.name}: {prefix + path}: {where} does not apply")
    for path in _MISSING.findall(output):
        problems.append(f"{patch.name}: {prefix + path}: the file does not exist in the target")
    for path in _EXISTS.findall(output):
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
