"""The thin edge to the git executable: run it, and turn its failures into clear messages.

Nothing else in ``tools/`` starts git. Not for interpreting patch text (``patchfile``) or
deciding what a failure means for the series (the verbs do that).
"""

import os
import shutil
import subprocess

from series.errors import SeriesError, usage

# A fixed identity and date make the materialised base commit the same on every machine.
BASE_IDENTITY = {
    "GIT_AUTHOR_NAME": "sglang-overlay base",
    "GIT_AUTHOR_EMAIL": "base@sglang-overlay.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "sglang-overlay base",
    "GIT_COMMITTER_EMAIL": "base@sglang-overlay.invalid",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
# Used for commits in throwaway trees (git am during check) when nothing else is configured.
TOOL_IDENTITY = {
    "GIT_COMMITTER_NAME": "sglang-overlay tools",
    "GIT_COMMITTER_EMAIL": "tools@sglang-overlay.invalid",
}


def require_git() -> str:
    path = shutil.which("git")
    if path is None:
        raise usage("git was not found on PATH; the series tools need git (>= 2.25)")
    return path


def run(args, cwd, env=None, check=True, stdin=None, ceiling=None):
    """Run ``git *args`` in ``cwd``; raise SeriesError with git's own words on failure.

    ``ceiling`` stops git from discovering a repository above that directory, so that
    ``git apply`` in a plain directory (an installed package) is not captured by an enclosing
    checkout that happens to contain it.
    """
    full_env = dict(os.environ)
    # A user's global hooks or line-ending rewriting must not change what we apply or compare.
    full_env.update(GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    if env:
        full_env.update(env)
    if ceiling is not None:
        full_env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    proc = subprocess.run(
        [require_git(), "-c", "core.autocrlf=false", "-c", "core.hooksPath=/dev/null", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        input=stdin,
    )
    if check and proc.returncode != 0:
        raise SeriesError(f"git {' '.join(args)} failed in {cwd}:\n{_text(proc.stderr).strip()}")
    return proc


def out(args, cwd, **kwargs) -> str:
    return _text(run(args, cwd, **kwargs).stdout).strip()


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def text(proc) -> str:
    """stdout and stderr of a finished git run, as one string (for parsing git's messages)."""
    return _text(proc.stdout) + _text(proc.stderr)


def is_work_tree(path) -> bool:
    if not os.path.isdir(path):
        return False
    proc = run(
        ["rev-parse", "--show-toplevel"],
        path,
        check=False,
        ceiling=os.path.dirname(os.path.abspath(path)),
    )
    return proc.returncode == 0 and os.path.samefile(_text(proc.stdout).strip(), path)


def dirty_paths(repo) -> list:
    """Tracked changes and untracked files; an operation in progress counts as dirty too."""
    # Not out(): stripping would eat the leading blank of the first ' M path' entry.
    listing = _text(run(["status", "--porcelain", "--untracked-files=normal"], repo).stdout)
    paths = [line[3:] for line in listing.splitlines() if line.strip()]
    git_dir = out(["rev-parse", "--git-dir"], repo)
    git_dir = os.path.join(repo, git_dir)
    for marker in ("rebase-apply", "rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
        if os.path.exists(os.path.join(git_dir, marker)):
            paths.append(f"(a git {marker} is in progress)")
    return paths


def has_identity(repo) -> bool:
    return run(["config", "user.email"], repo, check=False).returncode == 0
