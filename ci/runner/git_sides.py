"""Both sides of the A/B from git: a pull request's base and head commits of an sglang checkout
in upstream's layout (``python/sglang``, ``test/registered``), each written out as plain files
with ``git archive | tar -x`` (the user's checkout, its index and its ``.git`` are only read),
and the registered test files the head adds or modifies relative to the merge base. A side holds
only what its test processes use: the base its ``python/`` (first on their ``PYTHONPATH``), the
head that and ``test/`` (the tests, run from the head's top); an upstream checkout's other
folders (the kernel sources, docs, benchmarks) are never written. It decides nothing
about what runs or how it is judged: ``ci.runner.run`` hands the trees to the existing
``--unmodified-src``/``--change-src`` path.
"""

import os
import posixpath
import shutil
import subprocess
from dataclasses import dataclass

from ci import gitcmd
from ci.runner import RequestError
from ci.runner.collect import REGISTERED_ROOT

PACKAGE = "python/sglang"
BASE_PATHS = ("python",)  # what each side is written with (the module's docstring says why)
HEAD_PATHS = ("python", "test")
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


def _git(repo: str, *args: str, data: bool = False):
    """``git *args`` in ``repo``: its stdout (bytes with ``data``), or None when git fails."""
    try:
        proc = gitcmd.run(args, repo, check=False)
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
    try:
        if not gitcmd.is_top(root):
            raise RequestError(f"--root {root}: not the top of a git checkout")
        # Only tracked changes count: what the sides hold comes from commits, and a results
        # folder inside the checkout is untracked. Uncommitted edits would not be tested.
        dirty = gitcmd.changed(root)
    except OSError as exc:
        raise RequestError(f"--git-base/--git-head need git: {exc.strerror}") from None
    if dirty:
        raise RequestError(f"--root {root}: the work tree has uncommitted changes ({dirty[0]}...)")
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


def materialize(root: str, commit: str, dest: str, paths=HEAD_PATHS) -> str:
    """``paths`` of the tree of ``commit`` written to ``dest`` (a new folder) as plain files,
    no ``.git``; RequestError (one line) for an entry that could write outside ``dest``."""
    check_members(root, commit, paths)
    os.makedirs(dest)
    env = gitcmd.environment()
    archive = [*gitcmd.COMMAND, "archive", "--format=tar", commit, "--"]
    try:
        with subprocess.Popen(
            [*archive, *paths], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        ) as proc:
            # Streamed; GNU tar, as a root user too, owns what it writes as the caller.
            untar = subprocess.run(
                ["tar", "-x", "--no-same-owner", "--no-same-permissions", "-C", dest],
                stdin=proc.stdout,
                capture_output=True,
            )
    except OSError as exc:
        raise RequestError(f"--git-base/--git-head need git and tar: {exc.strerror}") from None
    if proc.returncode != 0 or untar.returncode != 0:
        why = untar.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["git archive"]
        raise RequestError(f"writing commit {commit[:12]} of {root} failed: {why[0]}")
    return dest


def check_members(root: str, commit: str, paths) -> None:
    """RequestError (one line) when an entry of ``paths`` in ``commit`` could write or point
    outside the side it is written to (``member_problem``), or lies under a link. The head is a
    pull request's commit; git itself refuses such trees, a crafted one need not."""
    listing = _git(root, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *paths, data=True)
    if listing is None:
        raise RequestError(f"git ls-tree {commit[:12]} failed in {root}")
    entries = {}  # name -> the blob of a link, or None
    for entry in listing.split(b"\0"):
        if entry:
            meta, _, raw = entry.partition(b"\t")
            link = meta.split()[2].decode() if meta.startswith(b"120000 ") else None
            entries[os.fsdecode(raw)] = link
    links = [name for name, blob in entries.items() if blob is not None]
    targets = dict(zip(links, _blobs(root, [entries[n] for n in links]), strict=True))
    for name in entries:
        problem = member_problem(name, targets.get(name))
        parts = name.split("/")
        for above in ("/".join(parts[:i]) for i in range(1, len(parts))):
            if problem is None and above in targets:
                problem = f"under the link {above[:200]!r}"
        if problem is not None:
            why = f"{name[:200]!r} is {problem}: no side is written"
            raise RequestError(f"commit {commit[:12]}: {why}")


def member_problem(name: str, link: str | None = None) -> str | None:
    """Why a tree's entry cannot be written out as a side, or None: a name that is absolute or
    has an empty, ``.``, ``..`` or ``.git`` part, or a link (``link``: its target) to an absolute
    path or out of the tree. Pure: it judges the names as git lists them."""
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        return "a path that leaves the tree"
    if link is None:
        return None
    if link.startswith("/"):
        return f"a link to the absolute path {link[:200]!r}"
    target = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
    if target == ".." or target.startswith("../"):
        return f"a link out of the tree ({link[:200]!r})"
    return None


def _blobs(root: str, oids) -> list:
    """The contents of the blobs ``oids``, as text."""
    if not oids:
        return []
    objects = "".join(f"{oid}\n" for oid in oids).encode()
    proc = gitcmd.run(["cat-file", "--batch"], root, stdin=objects, check=False)
    data, found = proc.stdout, []
    while data:
        header, _, data = data.partition(b"\n")
        fields = header.split()
        if len(fields) != 3 or not fields[2].isdigit():  # "<oid> missing": a broken repository
            raise RequestError(f"git cat-file {header[:60]!r} in {root}")
        size = int(fields[2])
        found.append(data[:size].decode("utf-8", "surrogateescape"))
        data = data[size + 1 :]
    return found


def make_sides(root: str, change: Change, out: str) -> tuple[str, str]:
    """The base and head trees under ``out``/sides/, replacing what an earlier run left there."""
    folder = os.path.join(out, SIDES_DIR)
    remove(out)
    base = materialize(root, change.base, os.path.join(folder, "base"), BASE_PATHS)
    head = materialize(root, change.head, os.path.join(folder, "head"), HEAD_PATHS)
    return base, head


def remove(out: str) -> None:
    shutil.rmtree(os.path.join(out, SIDES_DIR), ignore_errors=True)
