"""The one way this project starts git: the runner (``--git-base/--git-head``, the checkout's
commit), the series tools and the benchmarks alike, with one command prefix and one
environment. Variables that name a caller's repository (set inside a git hook) are dropped; the
system config, a user's hooks or line-ending rewriting and the locale never change what is read
or written; and no read refreshes the user's index (no optional locks).
"""

import os
import subprocess

CALLERS_REPO = frozenset({
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_PREFIX",
})  # fmt: skip
COMMAND = ("git", "-c", "core.autocrlf=false", "-c", "core.hooksPath=/dev/null")


def environment(extra=None, ceiling=None) -> dict:
    """This process's environment as every git of the project gets it, plus ``extra``;
    ``ceiling`` stops git from finding a repository above that folder."""
    env = {k: v for k, v in os.environ.items() if k not in CALLERS_REPO}
    env.update(GIT_CONFIG_NOSYSTEM="1", LC_ALL="C", GIT_OPTIONAL_LOCKS="0", **(extra or {}))
    if ceiling is not None:
        env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    return env


def run(args, cwd, env=None, stdin=None, ceiling=None) -> subprocess.CompletedProcess:
    """``git *args`` in ``cwd``, its output captured as bytes; OSError where git cannot start."""
    return subprocess.run(
        [*COMMAND, *args],
        cwd=cwd,
        env=environment(env, ceiling),
        capture_output=True,
        input=stdin,
    )


def out(args, cwd, **kwargs) -> str | None:
    """``git *args``' output, stripped; None where git fails (OSError where it cannot start)."""
    proc = run(args, cwd, **kwargs)
    return proc.stdout.decode("utf-8", "replace").strip() if proc.returncode == 0 else None


def changed(repo, untracked: str = "no") -> list | None:
    """The paths ``git status`` lists as changed in ``repo`` (untracked files too with
    ``untracked="normal"``); None where git fails."""
    proc = run(["status", "--porcelain", f"--untracked-files={untracked}"], repo)
    if proc.returncode != 0:
        return None
    # "XY PATH": read unstripped, or a line starting " M" would lose its path's first letter.
    return [line[3:] for line in proc.stdout.decode("utf-8", "replace").splitlines() if line]


def is_top(path) -> bool:
    """Whether ``path`` is the top of a git work tree: a folder inside another repository (a
    runner's workspace, a monorepo) is not."""
    if not os.path.isdir(path):
        return False
    ceiling = os.path.dirname(os.path.abspath(path))
    top = out(["rev-parse", "--show-toplevel"], path, ceiling=ceiling)
    return top is not None and os.path.samefile(top, path)
