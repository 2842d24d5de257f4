"""Upstream sglang's pinned pre-commit hooks on scratch copies of the files a series touches; a
failure counts against the series only where it brings the problem in."""

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, base, usage

# (name, command, Python files only), in upstream's settings; a name with a version is its pin,
# the others come from pre-commit-hooks.
_IGNORED = "ans,als,hel,boostrap,childs,te,vas,hsa,ment"  # upstream's codespell word list
HOOKS = (
    ("check-ast", "check-ast", True),
    ("debug-statements", "debug-statement-hook", True),
    ("check-merge-conflict", "check-merge-conflict --assume-in-merge", False),
    ("detect-private-key", "detect-private-key", False),
    ("check-added-large-files", "check-added-large-files --enforce-all", False),
    ("trailing-whitespace", "trailing-whitespace-fixer", False),
    ("end-of-file-fixer", "end-of-file-fixer", False),
    ("isort 5.13.2", "isort --check-only --diff --profile black --project sglang", True),
    ("black 24.10.0", "black --check --diff --line-length 88", True),
    ("codespell 2.4.1", f"codespell --ignore-words-list {_IGNORED}", False),
)
_BASIC = "pre-commit-hooks==5.0.0"
PINS = {n: n.replace(" ", "==") if " " in n else _BASIC for n, *_ in HOOKS}
CONFIG = ".pre-commit-config.yaml"
_STATUS = re.compile(r"^(.+?)\.+(?:\(no files to check\))?(Passed|Failed|Skipped)$")
_POSITION = re.compile(r":\d+(:\d+)?:")


def problem_lines(output: str) -> set:
    """A hook's complaints without positions: a diff's -/+ lines, report lines minus ``:LINE:``."""
    lines = [line for line in output.splitlines() if not line.startswith(("+++", "---", "@@"))]
    return {
        line if line.startswith(("+", "-")) else _POSITION.sub(":", line)
        for line in lines
        if line.startswith(("+", "-")) or _POSITION.search(line)
    }


def _hooks_cache_dir() -> Path:
    """Hooks, environments, verdicts: per user (as pre-commit's store), or $SGLANG_SERIES_CACHE."""
    if "SGLANG_SERIES_CACHE" in os.environ:
        return Path(os.environ["SGLANG_SERIES_CACHE"])
    xdg, home = os.environ.get("XDG_CACHE_HOME", ""), os.path.expanduser("~")
    if os.path.isabs(xdg):  # a relative one is ignored, as XDG says
        return Path(xdg) / "sglang-overlay"
    if os.path.isabs(home) and home != "/":  # HOME empty, or no home at all: this clone's
        return Path(home) / ".cache" / "sglang-overlay"
    return base.CACHE_DIR


HOOKS_CACHE_DIR = _hooks_cache_dir()


def check_files(patched: dict, before: dict) -> tuple:
    """(report lines, failures) of every hook on ``patched`` (path -> bytes after the series),
    ``before`` the base's bytes (None: added): one run for all, then a failing hook file by file."""
    home = ensure_env()
    together = _run_hooks(home, patched)
    report, failures = [], []
    for name, _, python_only in HOOKS:
        files = {p: data for p, data in patched.items() if p.endswith(".py") or not python_only}
        if files and together[name][0]:
            report.append(f"upstream hook {name}: ok on {len(files)} files")
        elif files:
            lines, problems = _judge(home, name, files, before)
            ok = [] if problems else [f"upstream hook {name}: ok on what the series changes"]
            report, failures = report + lines + ok, failures + problems
    return report, failures


def _judge(home: Path, name: str, patched: dict, before: dict) -> tuple:
    """Hook ``name`` on each file alone, after the series and on the base: a failure is a
    problem it reports after and not before."""
    olds = [path for path in patched if before.get(path) is not None]
    runs = [{path: data} for path, data in patched.items()] + [{p: before[p]} for p in olds]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = [r[name] for r in pool.map(partial(_run_hooks, home, only=name), runs)]
    on_base = dict(zip(olds, results[len(patched) :], strict=True))
    report, failures = [], []
    for path, (ok, output) in zip(patched, results, strict=False):
        base_ok, base_output = on_base.get(path, (True, ""))
        added = [] if ok or base_ok else sorted(problem_lines(output) - problem_lines(base_output))
        if not ok and not base_ok and not added:
            report.append(
                f"upstream hook {name}: {path} fails as the base release has it; "
                "nothing the series changes adds to that"
            )
        elif not ok:
            shown = ("\n".join(added) or output).splitlines()
            shown[40:] = [f"... ({len(shown) - 40} more lines)"] if len(shown) > 40 else []
            failures.append(f"{name} fails on {path}:\n" + "\n".join("    " + s for s in shown))
    return report, failures


def hooks_config() -> str:
    """``.pre-commit-config.yaml`` of ``HOOKS`` (JSON is YAML): local hooks, pins as dependencies."""
    hooks = [
        {
            "id": name.split()[0],
            "name": name,
            "entry": entry,
            "language": "python",
            "additional_dependencies": [PINS[name]],
            **({"files": r"\.py$"} if python_only else {}),
        }
        for name, entry, python_only in HOOKS
    ]
    header = "# Upstream sglang's pinned hooks, generated by tools/series/check.py; do not edit.\n"
    return header + json.dumps({"repos": [{"repo": "local", "hooks": hooks}]}, indent=2) + "\n"


def _pre_commit(home: Path, args, cwd):
    # The caller's pre-commit or git hook settings (SKIP, GIT_DIR, ...) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.pop("SKIP", None)
    argv = [sys.executable, "-m", "pre_commit", *args, "-c", str(home / CONFIG)]
    env["PRE_COMMIT_HOME"] = str(home)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def ensure_env() -> Path:
    """pre-commit's home for ``HOOKS``, their environments installed from PyPI the first time."""
    if importlib.util.find_spec("pre_commit") is None:
        raise usage("pre-commit is not installed in this Python; 'make install' installs it")
    config = hooks_config()
    home = HOOKS_CACHE_DIR / "upstream-hooks" / hashlib.sha256(config.encode()).hexdigest()[:12]
    if (home / ".installed").is_file():
        return home
    try:
        home.mkdir(parents=True, exist_ok=True)
        (home / CONFIG).write_text(config)
    except OSError as exc:
        raise usage(
            f"cannot write upstream's hooks into {home}: {exc.strerror}; set XDG_CACHE_HOME "
            "or SGLANG_SERIES_CACHE to a folder you can write"
        ) from None
    with tempfile.TemporaryDirectory(prefix="upstream-hooks-") as scratch:
        gitcmd.run(["init", "-q"], scratch)  # pre-commit works in a git repository
        proc = _pre_commit(home, ["install-hooks"], scratch)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        pins = ", ".join(sorted(set(PINS.values())))
        raise usage(f"could not install upstream's hooks ({pins}) from PyPI:\n{tail}")
    (home / ".installed").touch()
    return home


def _run_hooks(home: Path, files: dict, only: str | None = None) -> dict:
    """pre-commit (every hook, or ``only``) on scratch copies of ``files`` (path -> bytes):
    {hook name: (passed, output)}; stored in ``home`` by the exact paths and bytes."""
    digests = {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}
    key = hashlib.sha256(repr((only, sorted(digests.items()))).encode()).hexdigest()
    stored = home / "results" / f"{key}.json"
    try:
        return {name: tuple(result) for name, result in json.loads(stored.read_text()).items()}
    except (OSError, ValueError):
        pass  # not run yet (or a torn file from a killed run): run them
    results = _run_hooks_now(home, files, only)
    stored.parent.mkdir(exist_ok=True)
    partial_file = stored.with_suffix(f".{os.getpid()}.tmp")
    partial_file.write_text(json.dumps(results))
    os.replace(partial_file, stored)  # whole or absent, whoever reads it concurrently
    return results


def _run_hooks_now(home: Path, files: dict, only: str | None) -> dict:
    hook_id = [only.split()[0]] if only else []
    with tempfile.TemporaryDirectory(prefix="upstream-hook-") as scratch:
        for path, data in files.items():
            (Path(scratch) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(scratch) / path).write_bytes(data)
        gitcmd.run(["init", "-q"], scratch)  # pre-commit, and two of the basic checks, ask git
        proc = _pre_commit(home, ["run", *hook_id, "--color", "never", "--files", *files], scratch)
    results, current, names = {}, None, {name for name, *_ in HOOKS}
    for line in proc.stdout.splitlines():
        status = _STATUS.match(line)
        if status and status.group(1) in names:
            current = status.group(1) if status.group(2) != "Skipped" else None
            if current:
                results[current] = (status.group(2) == "Passed", [])
        elif current and not line.startswith(("- hook id: ", "- exit code: ", "- files were")):
            results[current][1].append(line)
    if proc.returncode != 0 and all(ok for ok, _ in results.values()):
        raise SeriesError(f"pre-commit failed:\n{(proc.stdout + proc.stderr).strip()}")
    return {name: (ok, "\n".join(lines).strip()) for name, (ok, lines) in results.items()}
