"""The two sides of the A/B as data: each is a tree (the installed sglang, a folder holding
``python/sglang``, or a commit of an sglang checkout written out with ``git archive | tar -x``)
plus the environment settings the caller gives it. The bot knows no product: an A/B of a runtime
switch is two sides with different settings, a pull request is two trees.

Test processes run PR code, so they start from an allowlisted environment (what a test needs),
never from the caller's whole one; ``ci/THREATS.md`` says why that is the line that matters.
"""

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from ci import gitcmd
from ci.evidence.model import MODES, Side
from ci.runner import RequestError

# What sglang's CI sets that changes how a test behaves: SGLANG_IS_IN_CI turns on
# CustomTestCase's retry and the other CI-only paths; DeepGEMM's JIT warms up the fast way.
# SGLANG_TEST_MAX_RETRY is not set there, so a caller's value would change the retry: it goes.
UPSTREAM_CI_ENV = {"SGLANG_IS_IN_CI": "true", "SGLANG_JIT_DEEPGEMM_FAST_WARMUP": "true"}
UPSTREAM_CI_UNSET = ("SGLANG_TEST_MAX_RETRY",)
# The caller's variables a test process keeps: by name, or by prefix.
ALLOWED = frozenset(
    "PATH HOME USER LOGNAME SHELL TMPDIR TZ TERM LANG LANGUAGE PYTHONPATH PYTHONHASHSEED "
    "PYTHONWARNINGS PYTHONDONTWRITEBYTECODE LD_LIBRARY_PATH OMP_NUM_THREADS MKL_NUM_THREADS "
    "MALLOC_ARENA_MAX XDG_CACHE_HOME HF_HOME HF_HUB_OFFLINE HF_HUB_CACHE "
    "PROMETHEUS_MULTIPROC_DIR".split()
)
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "SGLANG_", "TORCH_", "TORCHINDUCTOR_", "TRITON_")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

PACKAGE = "python/sglang"
REGISTERED_ROOT = "test/registered"
SIDES_DIR = "sides"  # under --out; removed when the run ends


@dataclass(frozen=True)
class SideSetup:
    """How one mode's test processes run: which sglang, with which of the caller's settings."""

    mode: str
    tree: str | None = None  # a folder holding python/sglang, first on PYTHONPATH
    env: dict = field(default_factory=dict)  # NAME -> VALUE, set last


def parse_env(items, flag: str) -> dict:
    """``NAME=VALUE`` items of ``--unmodified-env``/``--change-env`` as a dict."""
    settings = {}
    for item in items or ():
        name, eq, value = item.partition("=")
        if not eq or not _NAME.fullmatch(name):
            raise RequestError(f"{flag} {item!r:.100}: expected NAME=VALUE")
        settings[name] = value
    return settings


def setups(modes, trees: dict, envs: dict) -> dict:
    """mode -> SideSetup for each of ``modes``; refused when two sides would be the same."""
    made = {}
    for mode in modes:
        tree = trees.get(mode)
        if tree and not os.path.isdir(os.path.join(tree, "python", "sglang")):
            raise RequestError(f"--{mode}-src {tree}: no python/sglang inside")
        made[mode] = SideSetup(mode, os.path.abspath(tree) if tree else None, envs.get(mode, {}))
    if (
        len(made) == len(MODES)
        and len({(s.tree, tuple(sorted(s.env.items()))) for s in made.values()}) == 1
    ):
        raise RequestError(
            "both sides are the same: give them different trees (--unmodified-src/--change-src, "
            "--git-base/--git-head) or settings (--unmodified-env/--change-env NAME=VALUE)"
        )
    return made


def allowed(name: str) -> bool:
    return name in ALLOWED or name.startswith(ALLOWED_PREFIXES)


def environment(setup: SideSetup, base=None, upstream_ci: bool = True) -> dict:
    """The environment one side's test processes start with (``base``: os.environ, allowlisted):
    as in sglang's CI unless ``upstream_ci`` is False, the side's tree first on PYTHONPATH, and
    the side's own settings last."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if allowed(k) and k not in UPSTREAM_CI_UNSET}
    for name in UPSTREAM_CI_ENV:
        env.pop(name, None)
    if upstream_ci:
        env.update(UPSTREAM_CI_ENV)
    env["PYTHONUNBUFFERED"] = "1"
    if setup.tree:
        src = os.path.join(setup.tree, "python")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env.update(setup.env)
    return env


def test_environment(settings=None, upstream_ci: bool = True) -> dict:
    """What a test process of a side with ``settings`` starts with, for tools that start one
    themselves (the benchmarks)."""
    return environment(SideSetup("change", env=dict(settings or {})), upstream_ci=upstream_ci)


def side(setup: SideSetup, record: dict, commit: str | None = None, other=None) -> Side:
    """The side as the reports name it, from what its test processes imported, and the settings
    in which it differs from the ``other`` side."""
    version = record.get("sglang")
    label = f"sglang {version or '(version unknown)'}"
    if setup.tree:
        label += f" @ {commit[:12]}" if commit else f" ({os.path.basename(setup.tree)})"
    differing = [f"{k}={v}" for k, v in setup.env.items() if other is None or other.env.get(k) != v]
    if differing:
        label += f" ({' '.join(differing)})"
    return Side(label[:200], version, setup.tree, commit)


def imported_elsewhere(setup: SideSetup, record: dict) -> str | None:
    """Why a side's processes did not run the sglang it was meant to, or None."""
    path = record.get("sglang_path")
    if not (path and setup.tree):  # none imported sglang, or any installed one will do
        return None
    src = os.path.realpath(os.path.join(setup.tree, "python"))
    if os.path.commonpath([src, os.path.realpath(str(path))]) != src:
        return f"{setup.mode} imported sglang from {path}, not from {setup.tree}"
    return None


# ---- what the machine is ----


def nvidia_smi() -> list[dict]:
    """GPU name and driver per device, or [] where there is no nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    query = [exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines()]
    return [{"name": r[0], "driver": r[1], "memory": ",".join(r[2:])} for r in rows if len(r) >= 2]


def git_commit(cwd: str | None) -> dict:
    """The commit of the work tree whose top is ``cwd`` (not of a repository it sits in)."""
    try:
        if cwd and gitcmd.is_top(cwd):
            dirty = gitcmd.changed(cwd)
            return {
                "commit": gitcmd.out(["rev-parse", "HEAD"], cwd, check=False),
                "dirty": None if dirty is None else bool(dirty),
            }
    except OSError:  # no git
        pass
    return {"commit": None, "dirty": None}


def record_of(text: str | None) -> dict:
    """The facts a test process wrote about itself (``child.describe``): a JSON object of
    short texts, or why there is none."""
    try:
        raw = json.loads(text or "")
    except (ValueError, RecursionError):
        raw = None
    if not isinstance(raw, dict):
        return {"error": "no test process of this side reported its environment"}
    return {str(k)[:50]: None if v is None else str(v)[:500] for k, v in list(raw.items())[:20]}


# ---- both sides from git ----


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


def _git(repo: str, *args: str) -> str | None:
    try:
        proc = gitcmd.run(args, repo, check=False)
    except OSError as exc:
        raise RequestError(f"--git-base/--git-head need git: {exc.strerror}") from None
    return os.fsdecode(proc.stdout).strip() if proc.returncode == 0 else None


def read_change(root: str, base_rev: str, head_rev: str) -> Change:
    """The change from ``base_rev`` to ``head_rev`` in the clean checkout at ``root``."""
    root = os.path.abspath(root)
    try:
        if not gitcmd.is_top(root):
            raise RequestError(f"--root {root}: not the top of a git checkout")
        dirty = gitcmd.changed(root)  # uncommitted edits would not be tested
    except OSError as exc:
        raise RequestError(f"--git-base/--git-head need git: {exc.strerror}") from None
    if dirty:
        raise RequestError(f"--root {root}: the work tree has uncommitted changes ({dirty[0]}...)")
    commits = {}
    for flag, rev, needs in (
        ("base", base_rev, (PACKAGE,)),
        ("head", head_rev, (PACKAGE, REGISTERED_ROOT)),
    ):
        if not rev or rev.startswith("-"):
            raise RequestError(f"--git-{flag} {rev!r}: not a revision")
        commit = _git(
            root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"
        )
        if not commit:
            raise RequestError(f"--git-{flag} {rev!r}: no such commit in {root}")
        for path in needs:
            if _git(root, "cat-file", "-e", f"{commit}:{path}") is None:
                raise RequestError(f"--git-{flag} {rev}: no {path}/ in it (not sglang's layout)")
        commits[flag] = commit
    merge_base = _git(root, "merge-base", commits["base"], commits["head"])
    if not merge_base:
        raise RequestError(f"--git-base {base_rev} and --git-head {head_rev}: no merge base")

    def registered(status: str) -> tuple[str, ...]:
        listing = _git(
            root, "diff", "--no-renames", "--name-only", "-z", f"--diff-filter={status}",
            merge_base, commits["head"], "--", REGISTERED_ROOT,
        )  # fmt: skip
        names = (listing or "").split("\0")
        return tuple(
            sorted(n for n in names if n.endswith(".py") and n.rpartition("/")[2][:5] == "test_")
        )

    return Change(commits["base"], commits["head"], merge_base, registered("A"), registered("M"))


def materialize(root: str, commit: str, dest: str, paths) -> str:
    """``paths`` of ``commit`` written to the new folder ``dest`` as plain files, no ``.git``.
    The head's tree is PR code, which runs anyway: what its entries point at grants it nothing
    its tests could not do (``ci/THREATS.md``)."""
    os.makedirs(dest)
    archive = [*gitcmd.COMMAND, "archive", "--format=tar", commit, "--", *paths]
    untar = ["tar", "-x", "--no-same-owner", "--no-same-permissions", "-C", dest]
    try:
        with subprocess.Popen(
            archive,
            cwd=root,
            env=gitcmd.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ) as proc:
            done = subprocess.run(untar, stdin=proc.stdout, capture_output=True)
    except OSError as exc:
        raise RequestError(f"--git-base/--git-head need git and tar: {exc.strerror}") from None
    if proc.returncode != 0 or done.returncode != 0:
        why = os.fsdecode(done.stderr).strip().splitlines()[-1:] or ["git archive"]
        raise RequestError(f"writing commit {commit[:12]} of {root} failed: {why[0]}")
    return dest


def make_sides(root: str, change: Change, out: str) -> tuple[str, str]:
    """The base (its python/) and head (python/ and test/) trees under ``out``/sides/."""
    remove(out)
    folder = os.path.join(out, SIDES_DIR)
    base = materialize(root, change.base, os.path.join(folder, "base"), ("python",))
    head = materialize(root, change.head, os.path.join(folder, "head"), ("python", "test"))
    return base, head


def remove(out: str) -> None:
    shutil.rmtree(os.path.join(out, SIDES_DIR), ignore_errors=True)
