"""Upstream's pinned pre-commit hooks, run by ``check`` on every file the series touches.

Upstream sglang's ``.pre-commit-config.yaml`` pins black 24.10.0 (line length 88), isort
5.13.2 (profile black, ``sglang`` first-party), codespell 2.4.1 with its ignore list, and the
basic pre-commit-hooks v5.0.0 checks. They are installed once from PyPI into a virtual
environment under the series cache (``.cache/upstream-hooks/<pins>/``) and used offline
after that. A hook counts against the series only where the series brought the problem in:
a touched file that fails a hook is run again as the base release had it, and a failure the
base already has is reported as upstream's own, not the series'. Hooks run on scratch copies,
so a fixer hook never edits anything. Not for the project's own lint (ruff, pre-commit).
"""

import fcntl
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from series import wheels
from series.errors import SeriesError, usage

PINS = ("black==24.10.0", "isort==5.13.2", "codespell==2.4.1", "pre-commit-hooks==5.0.0")
CODESPELL_IGNORE = "ans,als,hel,boostrap,childs,te,vas,hsa,ment"
_READY = ".ready"
_POSITION = re.compile(r":\d+(:\d+)?:")


@dataclass(frozen=True)
class Hook:
    id: str
    argv: tuple  # the command, files appended
    python_only: bool = False


HOOKS = (
    Hook("check-ast", ("check-ast",), python_only=True),
    Hook("debug-statements", ("debug-statement-hook",), python_only=True),
    Hook("check-merge-conflict", ("check-merge-conflict", "--assume-in-merge")),
    Hook("detect-private-key", ("detect-private-key",)),
    Hook("check-added-large-files", ("check-added-large-files", "--enforce-all")),
    Hook("trailing-whitespace", ("trailing-whitespace-fixer",)),
    Hook("end-of-file-fixer", ("end-of-file-fixer",)),
    Hook(
        "isort 5.13.2",
        ("isort", "--check-only", "--diff", "--profile", "black", "--project", "sglang"),
        python_only=True,
    ),
    Hook("black 24.10.0", ("black", "--check", "--diff", "--line-length", "88"), True),
    Hook("codespell 2.4.1", ("codespell", "--ignore-words-list", CODESPELL_IGNORE)),
)


def env_dir() -> Path:
    tag = hashlib.sha256("\n".join(PINS).encode()).hexdigest()[:12]
    return wheels.CACHE_DIR / "upstream-hooks" / tag


def ensure_env() -> Path:
    """The hooks' virtual environment, installed from PyPI on first use only.

    Built in place (a venv's scripts name their interpreter by absolute path, so it cannot
    be moved); the ready marker is written last, and a lock keeps two runs from racing.
    """
    target = env_dir()
    if (target / _READY).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / _READY).is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)  # a half-built one from an interrupted run
        subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
        pip = [str(target / "bin" / "python"), "-m", "pip", "install"]
        proc = subprocess.run(
            [*pip, "--disable-pip-version-check", "-q", *PINS], capture_output=True, text=True
        )
        if proc.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
            raise usage(
                f"could not install upstream's hooks ({', '.join(PINS)}) from PyPI:\n{tail}"
            )
        (target / _READY).write_text("\n".join(PINS) + "\n")
    return target


def applicable(hook: Hook, path: str) -> bool:
    return path.endswith(".py") or not hook.python_only


def run_hook(hook: Hook, files: dict, bin_dir: Path) -> tuple:
    """Run ``hook`` on scratch copies of ``files`` (path -> bytes); (ok, output)."""
    with tempfile.TemporaryDirectory(prefix="upstream-hook-") as scratch:
        for path, data in files.items():
            target = Path(scratch) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        # Two of the basic checks ask git about the tree they run in.
        subprocess.run(["git", "init", "-q", scratch], check=True, capture_output=True)
        argv = [str(bin_dir / hook.argv[0]), *hook.argv[1:], *files]
        proc = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=300)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def check_files(patched: dict, base: dict) -> tuple:
    """Judge every hook on the series' files.

    ``patched`` maps upstream path -> bytes after the series; ``base`` the same paths ->
    bytes in the base release (None for files the series adds). Returns (report lines,
    failure messages): a failure is a hook that passes on the base file and fails after.
    """
    bin_dir = ensure_env() / "bin"
    report, failures = [], []
    plan = [(h, {p: d for p, d in patched.items() if applicable(h, p)}) for h in HOOKS]
    plan = [(hook, files) for hook, files in plan if files]
    # Each hook is its own short process: run them side by side, judge them in order.
    with ThreadPoolExecutor(max_workers=4) as pool:
        first = list(pool.map(lambda item: run_hook(item[0], item[1], bin_dir)[0], plan))
    for (hook, files), ok in zip(plan, first, strict=True):
        if ok:
            report.append(f"upstream hook {hook.id}: ok on {len(files)} files")
            continue
        for path, data in files.items():
            ok, output = run_hook(hook, {path: data}, bin_dir)
            if ok:
                continue
            before = base.get(path)
            if before is not None:
                base_ok, base_output = run_hook(hook, {path: before}, bin_dir)
                added = [] if base_ok else introduced(base_output, output)
                if not base_ok and not added:
                    report.append(
                        f"upstream hook {hook.id}: {path} fails as the base release has it; "
                        "nothing the series changes adds to that"
                    )
                    continue
                output = "\n".join(added) if added else output
            failures.append(f"{hook.id} fails on {path}:\n{_excerpt(output)}")
        if not any(f.startswith(f"{hook.id} fails") for f in failures):
            report.append(f"upstream hook {hook.id}: ok on what the series changes")
    return report, failures


def problem_lines(output: str) -> set:
    """What a hook's output says is wrong, without positions: a diff's added and removed
    lines, or a report line with its ``:LINE:`` numbers taken out."""
    problems = set()
    for line in output.splitlines():
        if line.startswith(("+++", "---", "@@")):
            continue
        if line.startswith(("+", "-")):
            problems.add(line)
        elif _POSITION.search(line):
            problems.add(_POSITION.sub(":", line))
    return problems


def introduced(base_output: str, patched_output: str) -> list:
    """The problems a hook reports after the series that it did not report on the base."""
    return sorted(problem_lines(patched_output) - problem_lines(base_output))


def _excerpt(output: str, limit: int = 40) -> str:
    lines = output.splitlines()
    shown = lines[:limit] + (
        [f"... ({len(lines) - limit} more lines)"] if len(lines) > limit else []
    )
    return "\n".join("    " + line for line in shown)


def verify(series, repo: Path, base_tag: str) -> list:
    """Run the hooks on the series' files in a repository where it is applied; raise on a
    failure the series introduced."""
    from series import gitcmd

    patched, base = {}, {}
    for path in series.touched_files():
        target = repo / path
        if not target.is_file():
            continue  # the series deletes it
        patched[path] = target.read_bytes()
        blob = gitcmd.run(["cat-file", "blob", f"{base_tag}:{path}"], repo, check=False)
        base[path] = blob.stdout if blob.returncode == 0 else None
    report, failures = check_files(patched, base)
    if failures:
        raise SeriesError(
            "upstream's pre-commit hooks fail on what the series changes:\n  "
            + "\n  ".join(failures)
        )
    return report
