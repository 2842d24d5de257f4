"""Both sides of the A/B from git: a pull request's base and head commits of an sglang checkout
in upstream's layout (``python/sglang``, ``test/registered``), each written out as a plain tree
with ``git archive`` (the user's checkout, its index and its ``.git`` are only read), and the
registered test files the head adds or modifies relative to the merge base. It decides nothing
about what runs or how it is judged: ``ci.runner.run`` hands the trees to the existing
``--unmodified-src``/``--change-src`` path.
"""

import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass

from ci import gitcmd
from ci.runner import RequestError
from ci.runner.collect import REGISTERED_ROOT

PACKAGE = "python/sglang"
SIDES_DIR = "sides"  # under --out; removed when the run ends


@dataclass(frozen=True)
class Change:
    """A pull request as git has it: the two commits, their merge base, and the registered test
    files the head adds (absent at the merge base) or modifies."""

    base: str  # full commit ids
    head: str
    merge_base: str
    added: tuple[str, ...]
    modified: tuple[str, ...]

    @property
    def tests(self) -> tuple[str, ...]:
        return tuple(sorted(self.added + self.modified))

    def to_json(self) -> dict:
        return {
            "base": self.base,
            "head": self.head,
            "merge_base": self.merge_base,
            "added": list(self.added),
            "modified": list(self.modified),
        }


def _git(repo: str, *args: str, data: bool = False):
    """``git *args`` in ``repo``: its stdout (bytes with ``data``), or None when git fails."""
    try:
        proc = gitcmd.run(args, repo)
    except OSError as exc:
        raise RequestError(f"--git-base/--git-head need git: {exc.strerror}") from None
    if proc.returncode != 0:
        return None
    return proc.stdout if data else proc.stdout.decode("utf-8", "replace").strip()


def read_change(root: str, base_rev: str, head_rev: str) -> Change:
    """The change from ``base_rev`` to ``head_rev`` in the checkout at ``root``; RequestError
    (one line) for a folder that is not a checkout's top, a dirty work tree, an unknown ref or a
    tree not in sglang's layout."""
    root = os.path.abspath(root)
    top = _git(root, "rev-parse", "--show-toplevel") if os.path.isdir(root) else None
    if top is None or os.path.realpath(top) != os.path.realpath(root):
        raise RequestError(f"--root {root}: not the top of a git checkout")
    # Only tracked changes count: what the sides hold comes from commits, and a results folder
    # inside the checkout is untracked. Edits the user has not committed would not be tested.
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no", data=True)
    if dirty:
        # "XY PATH": read unstripped, or a line starting " M" would lose its path's first letter
        first = dirty.decode("utf-8", "replace").splitlines()[0][3:]
        raise RequestError(f"--root {root}: the work tree has uncommitted changes ({first}...)")
    base, head = (
        _commit(root, flag, rev) for flag, rev in (("base", base_rev), ("head", head_rev))
    )
    for flag, rev, commit, needs in (
        ("base", base_rev, base, (PACKAGE,)),
        ("head", head_rev, head, (PACKAGE, REGISTERED_ROOT)),
    ):
        for path in needs:
            if _git(root, "cat-file", "-e", f"{commit}:{path}") is None:
                raise RequestError(f"--git-{flag} {rev}: no {path}/ in it (not sglang's layout)")
    merge_base = _git(root, "merge-base", base, head)
    if not merge_base:
        raise RequestError(f"--git-base {base_rev} and --git-head {head_rev}: no merge base")
    return Change(
        base,
        head,
        merge_base,
        _registered(root, merge_base, head, "A"),
        _registered(root, merge_base, head, "M"),
    )


def _commit(root: str, flag: str, rev: str) -> str:
    if not rev or rev.startswith("-"):
        raise RequestError(f"--git-{flag} {rev!r}: not a revision")
    commit = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    if not commit:
        raise RequestError(f"--git-{flag} {rev!r}: no such commit in {root}")
    return commit


def _registered(root: str, merge_base: str, head: str, status: str) -> tuple[str, ...]:
    """The ``test_*.py`` files under test/registered whose diff status is ``status``."""
    listing = _git(
        root, "diff", "--no-renames", "--name-only", "-z", f"--diff-filter={status}",
        merge_base, head, "--", REGISTERED_ROOT,
    )  # fmt: skip
    names = (listing or "").split("\0")
    return tuple(
        sorted(n for n in names if n.endswith(".py") and n.rpartition("/")[2][:5] == "test_")
    )


def materialize(root: str, commit: str, dest: str) -> str:
    """The tree of ``commit`` written to ``dest`` (a new folder) as plain files, no ``.git``."""
    os.makedirs(dest)
    with subprocess.Popen(
        [*gitcmd.COMMAND, "archive", "--format=tar", commit],
        cwd=root,
        env=gitcmd.environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as proc:
        # Streamed; the data filter refuses links out of the tree and absolute or ``..`` names
        # (the head is a pull request's commit).
        with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
            archive.extractall(dest, filter="data")
    if proc.returncode != 0:
        raise RequestError(f"git archive {commit[:12]} failed in {root}")
    return dest


def make_sides(root: str, change: Change, out: str) -> tuple[str, str]:
    """The base and head trees under ``out``/sides/, replacing what an earlier run left there."""
    folder = os.path.join(out, SIDES_DIR)
    remove(out)
    base = materialize(root, change.base, os.path.join(folder, "base"))
    head = materialize(root, change.head, os.path.join(folder, "head"))
    return base, head


def remove(out: str) -> None:
    shutil.rmtree(os.path.join(out, SIDES_DIR), ignore_errors=True)
