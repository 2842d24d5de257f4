"""Both sides of the A/B from git: a pull request's base and head commits of an sglang checkout
in upstream's layout (``python/sglang``, ``test/registered``), each written out as a plain tree
with ``git archive`` (the user's checkout, its index and its ``.git`` are only read), and the
registered test files the head adds or modifies relative to the merge base. It decides nothing
about what runs or how it is judged: ``ci.runner.run`` hands the trees to the existing
``--unmodified-src``/``--change-src`` path.
"""

import os
import posixpath
import shutil
import subprocess
import tarfile
from dataclasses import dataclass

from ci.runner import RequestError
from ci.runner.collect import REGISTERED_ROOT

PACKAGE = "python/sglang"
SIDES_DIR = "sides"  # under --out; removed when the run ends
_CALLERS_REPO = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX")


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
    env = {k: v for k, v in os.environ.items() if k not in _CALLERS_REPO}
    # No optional lock: ``git status`` would otherwise refresh and rewrite the user's index.
    env.update(GIT_CONFIG_NOSYSTEM="1", LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
    try:
        proc = subprocess.run(
            ["git", "-c", "core.hooksPath=/dev/null", *args], cwd=repo, env=env, capture_output=True
        )
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
        merge_base, head, "--", REGISTERED_ROOT, data=True,
    )  # fmt: skip
    # The names as the file system has them (a name that is not UTF-8 keeps its bytes), so the
    # selection refuses such a file by its own name, not as a --tests path that does not exist.
    names = os.fsdecode(listing or b"").split("\0")
    return tuple(
        sorted(n for n in names if n.endswith(".py") and n.rpartition("/")[2][:5] == "test_")
    )


def materialize(root: str, commit: str, dest: str) -> str:
    """The tree of ``commit`` written to ``dest`` (a new folder) as plain files, no ``.git``."""
    os.makedirs(dest)
    env = {k: v for k, v in os.environ.items() if k not in _CALLERS_REPO}
    with subprocess.Popen(
        ["git", "archive", "--format=tar", commit],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as proc:
        # Streamed; each member checked (the head is a pull request's commit), then the data
        # filter, which also refuses a link that leaves the tree through links before it.
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
                archive.extractall(dest, filter=_checked_member)
        except tarfile.TarError as exc:
            proc.kill()
            raise RequestError(f"commit {commit[:12]}: {exc}") from None
    if proc.returncode != 0:
        raise RequestError(f"git archive {commit[:12]} failed in {root}")
    return dest


def member_problem(name: str, link: str | None = None) -> str | None:
    """Why a tree's entry cannot be written out as a side, or None: a name that is absolute or
    climbs out with ``..``, or a link (``link``: its target) to an absolute path or out of the
    tree. Pure: it judges the names as git lists them, however the tree is then written."""
    parts = name.split("/")
    if name.startswith("/") or ".." in parts:
        return "a path that leaves the tree"
    if link is None:
        return None
    if link.startswith("/"):
        return f"a link to the absolute path {link[:200]!r}"
    target = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
    if target == ".." or target.startswith("../"):
        return f"a link out of the tree ({link[:200]!r})"
    return None


def _checked_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    link = member.linkname if member.issym() else None
    problem = member_problem(member.name, link)
    if problem is None and member.islnk():  # a hard link names its target from the top
        problem = member_problem(member.linkname)
    if problem is not None:
        raise tarfile.FilterError(f"{member.name[:200]!r} is {problem}: no side is written")
    return tarfile.data_filter(member, dest)


def make_sides(root: str, change: Change, out: str) -> tuple[str, str]:
    """The base and head trees under ``out``/sides/, replacing what an earlier run left there."""
    folder = os.path.join(out, SIDES_DIR)
    remove(out)
    base = materialize(root, change.base, os.path.join(folder, "base"))
    head = materialize(root, change.head, os.path.join(folder, "head"))
    return base, head


def remove(out: str) -> None:
    shutil.rmtree(os.path.join(out, SIDES_DIR), ignore_errors=True)
