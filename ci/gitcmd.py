"""The one way this project starts git (runner, series tools, benchmarks): a caller's repository
variables (set inside a git hook) dropped; the system config, a user's hooks, line-ending
rewriting and the locale change nothing read or written; no read refreshes the user's index.
"""

import os
import subprocess

from ci.errors import CiError

CALLERS_REPO = frozenset({
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_PREFIX",
})  # fmt: skip
COMMAND = ("git", "-c", "core.autocrlf=false", "-c", "core.hooksPath=/dev/null")
# For commits in throwaway trees when the user configured no identity.
TOOL_IDENTITY = {
    "GIT_COMMITTER_NAME": "sglang-overlay tools",
    "GIT_COMMITTER_EMAIL": "tools@sglang-overlay.invalid",
}


class GitError(CiError):
    """A git command that failed; the message carries git's own words."""


def run(args, cwd, env=None, stdin=None, ceiling=None, check=True) -> subprocess.CompletedProcess:
    """``git *args`` in ``cwd`` with ``env`` added, output captured as bytes; ``ceiling`` stops
    git from finding a repository above that folder. GitError on failure unless ``check`` is
    false (OSError where git cannot start)."""
    environ = {k: v for k, v in os.environ.items() if k not in CALLERS_REPO}
    environ.update(GIT_CONFIG_NOSYSTEM="1", LC_ALL="C", GIT_OPTIONAL_LOCKS="0", **(env or {}))
    if ceiling is not None:
        environ["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    proc = subprocess.run([*COMMAND, *args], cwd=cwd, env=environ, capture_output=True, input=stdin)
    if check and proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip()
        raise GitError(f"git {' '.join(map(str, args))} failed in {cwd}: {said}")
    return proc


def out(args, cwd, check=True, **kwargs) -> str | None:
    """``git *args``' stdout, stripped; None where git fails and ``check`` is false."""
    proc = run(args, cwd, check=check, **kwargs)
    return proc.stdout.decode("utf-8", "replace").strip() if proc.returncode == 0 else None


def ok(args, cwd, **kwargs) -> bool:
    return run(args, cwd, check=False, **kwargs).returncode == 0


def text(proc) -> str:
    """stdout and stderr of a finished git run, as one string (for reading git's messages)."""
    return (proc.stdout + proc.stderr).decode("utf-8", "replace")


def changed(repo, untracked: str = "no") -> list | None:
    """The paths ``git status`` lists as changed in ``repo`` (untracked files too with
    ``untracked="normal"``); None where git fails."""
    proc = run(["status", "--porcelain", f"--untracked-files={untracked}"], repo, check=False)
    if proc.returncode != 0:
        return None
    # "XY PATH": read unstripped, or a line starting " M" would lose its path's first letter.
    return [line[3:] for line in proc.stdout.decode("utf-8", "replace").splitlines() if line]


def dirty_paths(repo) -> list:
    """Tracked changes and untracked files; an operation in progress counts as dirty too."""
    paths = changed(repo, untracked="normal")
    if paths is None:
        raise GitError(f"git status failed in {repo}")
    git_dir = os.path.join(repo, out(["rev-parse", "--git-dir"], repo))
    for marker in ("rebase-apply", "rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
        if os.path.exists(os.path.join(git_dir, marker)):
            paths.append(f"(a git {marker} is in progress)")
    return paths


def is_top(path) -> bool:
    """Whether ``path`` is the top of a git work tree, not a folder inside another one."""
    if not os.path.isdir(path):
        return False
    ceiling = os.path.dirname(os.path.abspath(path))
    top = out(["rev-parse", "--show-toplevel"], path, check=False, ceiling=ceiling)
    return top is not None and os.path.samefile(top, path)
