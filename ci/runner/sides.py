"""The two sides of the A/B as data: each is a tree (the installed sglang, a folder holding
``python/sglang``, or a commit written out) plus the settings the caller gives its processes.
Test processes run PR code: they start from an allowlisted environment (ci/THREATS.md N2)."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from collections import namedtuple
from dataclasses import dataclass, field

from ci import gitcmd
from ci.errors import CiError
from ci.evidence.model import MODES, Side
from ci.runner.collect import REGISTERED_ROOT

# What sglang's CI sets that changes how a test behaves: SGLANG_IS_IN_CI turns on CustomTestCase's
# retry and the other CI-only paths. SGLANG_TEST_MAX_RETRY is not set there, so a caller's goes.
UPSTREAM_CI_ENV = {"SGLANG_IS_IN_CI": "true", "SGLANG_JIT_DEEPGEMM_FAST_WARMUP": "true"}
UPSTREAM_CI_UNSET = ("SGLANG_TEST_MAX_RETRY",)
ALLOWED = frozenset(
    "PATH HOME USER LOGNAME SHELL TMPDIR TZ TERM LANG LANGUAGE PYTHONPATH PYTHONHASHSEED "
    "PYTHONWARNINGS PYTHONDONTWRITEBYTECODE LD_LIBRARY_PATH OMP_NUM_THREADS MKL_NUM_THREADS "
    "MALLOC_ARENA_MAX XDG_CACHE_HOME HF_HOME HF_HUB_OFFLINE HF_HUB_CACHE "
    "PROMETHEUS_MULTIPROC_DIR".split()
)
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "SGLANG_", "TORCH_", "TORCHINDUCTOR_", "TRITON_")
PACKAGE = "python/sglang"
SIDES_DIR = "sides"  # under --out; removed when the run ends


@dataclass(frozen=True)
class SideSetup:
    """How one mode's test processes run: which sglang, with which of the caller's settings."""

    mode: str
    tree: str | None = None  # a folder holding python/sglang, first on PYTHONPATH
    env: dict = field(default_factory=dict)  # NAME -> VALUE, set last


def setups(request) -> dict:
    """mode -> SideSetup for each of ``MODES``, from ``request``'s ``--MODE-src`` and
    ``--MODE-env NAME=VALUE``; refused when the two sides would be the same."""
    made = {}
    for mode in MODES:
        tree, env = getattr(request, f"{mode}_src"), {}
        for item in getattr(request, f"{mode}_env"):
            name, eq, value = item.partition("=")
            if not eq or not re.fullmatch(r"[A-Za-z_]\w*", name, re.ASCII):
                raise CiError(f"--{mode}-env {item!r:.100}: expected NAME=VALUE")
            env[name] = value
        if tree and not os.path.isdir(os.path.join(tree, PACKAGE)):
            raise CiError(f"--{mode}-src {tree}: no python/sglang inside")
        made[mode] = SideSetup(mode, os.path.abspath(tree) if tree else None, env)
    if len({(s.tree, str(sorted(s.env.items()))) for s in made.values()}) == 1:
        raise CiError(
            "both sides are the same: give them different trees (--unmodified-src/--change-src, "
            "--git-base/--git-head) or settings (--unmodified-env/--change-env NAME=VALUE)"
        )
    return made


def environment(setup: SideSetup, base=os.environ, upstream_ci: bool = True) -> dict:
    """The environment one side's test processes start with: ``base`` (os.environ) allowlisted,
    as in sglang's CI unless ``upstream_ci`` is False, the side's tree first on PYTHONPATH, and
    the side's own settings last."""
    allowed = (k for k in base if k in ALLOWED or k.startswith(ALLOWED_PREFIXES))
    env = {k: base[k] for k in allowed if k not in (*UPSTREAM_CI_UNSET, *UPSTREAM_CI_ENV)}
    env.update(UPSTREAM_CI_ENV if upstream_ci else {}, PYTHONUNBUFFERED="1")
    if setup.tree:
        src = os.path.join(setup.tree, "python")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return {**env, **setup.env}


def side(setup: SideSetup, record: dict, setups: dict, commit: str | None) -> Side:
    """The side as the reports name it, from what its test processes imported, and the settings
    in which it differs from the other side in ``setups``."""
    other = next(o for o in setups.values() if o is not setup)
    commit = commit or git_commit(setup.tree)["commit"]
    version = record.get("sglang")
    label = f"sglang {version or '(version unknown)'}"
    if setup.tree:
        label += f" @ {commit[:12]}" if commit else f" ({os.path.basename(setup.tree)})"
    differing = [f"{k}={v}" for k, v in setup.env.items() if other.env.get(k) != v]
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


def record_of(text: str | None) -> dict:
    """What a side's test process said about itself (its ``{"process"}`` line), as short texts."""
    raw = None
    with contextlib.suppress(ValueError, KeyError, RecursionError):
        raw = json.loads(text)["process"] if text else None
    if not isinstance(raw, dict):
        return {"error": "no test process of this side reported its environment"}
    return {str(k)[:50]: None if v is None else str(v)[:500] for k, v in list(raw.items())[:20]}


def nvidia_smi() -> list[dict]:
    """GPU name, driver and memory per device, or [] where there is no nvidia-smi."""
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):  # no nvidia-smi
        return []
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines()]
    return [{"name": r[0], "driver": r[1], "memory": ",".join(r[2:])} for r in rows if len(r) >= 2]


def git_commit(cwd: str | None) -> dict:
    """The commit of the work tree whose top is ``cwd`` (not of a repository it sits in)."""
    with contextlib.suppress(OSError):  # no git
        if cwd and gitcmd.is_top(cwd):
            dirty = gitcmd.changed(cwd)
            commit = gitcmd.out(["rev-parse", "HEAD"], cwd, check=False)
            return {"commit": commit, "dirty": None if dirty is None else bool(dirty)}
    return {"commit": None, "dirty": None}


# ---- both sides from git ----


# A pull request as git has it: the two commits (full ids), their merge base, and the registered
# test files the head adds or modifies since that base (tuples).
Change = namedtuple("Change", "base head merge_base added modified")


def read_change(root: str, base_rev: str, head_rev: str) -> Change:
    """The change from ``base_rev`` to ``head_rev`` in the clean checkout at ``root``."""

    def git(*args):
        return gitcmd.out(list(args), root, check=False)

    if shutil.which("git") is None:
        raise CiError("--git-base/--git-head need git")
    if not gitcmd.is_top(root):
        raise CiError(f"--root {root}: not the top of a git checkout")
    dirty = gitcmd.changed(root)  # uncommitted edits would not be tested
    if dirty:
        raise CiError(f"--root {root}: the work tree has uncommitted changes ({dirty[0]}...)")
    commits = {}
    for flag, rev, needs in (
        ("base", base_rev, (PACKAGE,)),
        ("head", head_rev, (PACKAGE, REGISTERED_ROOT)),
    ):
        commit = git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        if not commit:
            raise CiError(f"--git-{flag} {rev!r}: no such commit in {root}")
        for path in needs:
            if git("cat-file", "-e", f"{commit}:{path}") is None:
                raise CiError(f"--git-{flag} {rev}: no {path}/ in it (not sglang's layout)")
        commits[flag] = commit
    merge_base = git("merge-base", commits["base"], commits["head"])
    if not merge_base:
        raise CiError(f"--git-base {base_rev} and --git-head {head_rev}: no merge base")

    def registered(status: str) -> tuple[str, ...]:
        listing = git("diff", "--no-renames", "--name-only", "-z", f"--diff-filter={status}",
                      merge_base, commits["head"], "--", REGISTERED_ROOT)  # fmt: skip
        names = (listing or "").split("\0")
        return tuple(sorted(n for n in names if re.fullmatch(r"(.*/)?test_[^/]*\.py", n)))

    return Change(commits["base"], commits["head"], merge_base, registered("A"), registered("M"))


def make_sides(root: str, change: Change, out: str) -> tuple[str, str]:
    """The base (its python/) and head (python/ and test/) trees under ``out``/sides/, written
    from git as plain files. The head's tree is PR code, which runs anyway: what its entries
    point at grants it nothing its tests could not do (ci/THREATS.md N1)."""
    made = []
    for name, commit, paths in (
        ("base", change.base, ("python",)),
        ("head", change.head, ("python", "test")),
    ):
        dest = os.path.join(out, SIDES_DIR, name)
        os.makedirs(dest)
        try:
            archive = gitcmd.run(["archive", "--format=tar", commit, "--", *paths], root).stdout
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(dest, filter="fully_trusted")
        except (OSError, tarfile.TarError, gitcmd.GitError) as exc:
            raise CiError(f"writing commit {commit[:12]} of {root} failed: {exc}") from None
        made.append(dest)
    return made[0], made[1]
