"""Upstream sglang's pinned pre-commit hooks (``upstream-hooks.yaml``; pre-commit installs them
into its own per-user store) on scratch copies of the files a series touches; a failure counts
against the series only where it brings the problem in."""

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache, partial
from pathlib import Path

from ci import gitcmd
from tools.series import base, usage

CONFIG = Path(__file__).with_name("upstream-hooks.yaml")
_STATUS = re.compile(r"^(.+?)\.+(?:\(no files to check\))?(Passed|Failed|Skipped)$")
_POSITION = re.compile(r":\d+(:\d+)?:")
# Verdicts are keyed by the config and the files' bytes, so one folder per user serves every
# clone (as pre-commit's store does): XDG's cache (an absolute one), or $SGLANG_SERIES_CACHE.
_XDG = os.environ.get("XDG_CACHE_HOME", "")
_VERDICTS = (
    base.CACHE_DIR
    if "SGLANG_SERIES_CACHE" in os.environ
    else (Path(_XDG) if os.path.isabs(_XDG) else Path.home() / ".cache") / "sglang-overlay"
) / "upstream-hooks"


@cache
def table() -> dict:
    """Each hook's name (a pinned one's with its version) -> its entry in ``CONFIG``."""
    if importlib.util.find_spec("pre_commit") is None:
        raise usage("pre-commit is not installed in this Python; 'make install' installs it")
    import yaml  # pre-commit's own dependency

    return {hook["name"]: hook for hook in yaml.safe_load(CONFIG.read_text())["repos"][0]["hooks"]}


def problem_lines(output: str) -> set:
    """A hook's complaints without positions: a diff's -/+ lines, report lines minus ``:LINE:``."""
    lines = [line for line in output.splitlines() if not line.startswith(("+++", "---", "@@"))]
    return {
        line if line.startswith(("+", "-")) else _POSITION.sub(":", line)
        for line in lines
        if line.startswith(("+", "-")) or _POSITION.search(line)
    }


def check_files(patched: dict, before: dict) -> tuple:
    """(report lines, failures) of every hook on ``patched`` (path -> bytes after the series),
    ``before`` the base's bytes (None: added): one run for all, then a failing hook file by file."""
    together = _run_hooks(patched)
    report, failures = [], []
    for name, hook in table().items():
        files = {p: data for p, data in patched.items() if re.search(hook.get("files", ""), p)}
        if files and together[name][0]:
            report.append(f"upstream hook {name}: ok on {len(files)} files")
        elif files:
            lines, problems = _judge(name, files, before)
            ok = [] if problems else [f"upstream hook {name}: ok on what the series changes"]
            report, failures = report + lines + ok, failures + problems
    return report, failures


def _judge(name: str, patched: dict, before: dict) -> tuple:
    """Hook ``name`` on each file alone, after the series and on the base: a failure is a
    problem it reports after and not before."""
    olds = [path for path in patched if before.get(path) is not None]
    runs = [{path: data} for path, data in patched.items()] + [{p: before[p]} for p in olds]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = [r[name] for r in pool.map(partial(_run_hooks, only=name), runs)]
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


def _run_hooks(files: dict, only: str | None = None) -> dict:
    """pre-commit (every hook, or ``only``) on scratch copies of ``files`` (path -> bytes):
    {hook name: (passed, output)}; kept in the cache by the config and the exact paths and bytes."""
    digests = sorted((path, hashlib.sha256(data).hexdigest()) for path, data in files.items())
    key = hashlib.sha256(repr((CONFIG.read_text(), only, digests)).encode()).hexdigest()
    stored = _VERDICTS / f"{key}.json"
    try:
        return {name: tuple(result) for name, result in json.loads(stored.read_text()).items()}
    except (OSError, ValueError):
        pass  # not run yet (or a torn file from a killed run): run them
    with tempfile.TemporaryDirectory(prefix="upstream-hook-") as scratch:
        for path, data in files.items():
            (Path(scratch) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(scratch) / path).write_bytes(data)
        gitcmd.run(["init", "-q"], scratch)  # pre-commit, and two of the basic checks, ask git
        # The caller's git and pre-commit hook settings (GIT_DIR, SKIP, ...) must not leak in;
        # PRE_COMMIT_HOME (the store pre-commit keeps the environments in) does.
        env = {
            k: v
            for k, v in os.environ.items()
            if k == "PRE_COMMIT_HOME" or not k.startswith(("GIT_", "PRE_COMMIT", "SKIP"))
        }
        hook_id = [table()[only]["id"]] if only else []
        argv = [sys.executable, "-m", "pre_commit", "run", *hook_id, "-c", str(CONFIG)]
        argv += ["--color", "never", "--files", *files]
        proc = subprocess.run(
            argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=600
        )
    results, current = {}, None
    for line in proc.stdout.splitlines():
        status = _STATUS.match(line)
        if status and status.group(1) in table():
            current = status.group(1) if status.group(2) != "Skipped" else None
            if current:
                results[current] = (status.group(2) == "Passed", [])
        elif current and not line.startswith(("- hook id: ", "- exit code: ", "- files were")):
            results[current][1].append(line)
    if proc.returncode != 0 and all(ok for ok, _ in results.values()):  # none ran: installing
        said = ((proc.stdout + proc.stderr).strip().splitlines() or ["no output"])[-1]
        raise usage(f"pre-commit could not install or run upstream's hooks from PyPI: {said}")
    results = {name: (ok, "\n".join(lines).strip()) for name, (ok, lines) in results.items()}
    stored.parent.mkdir(parents=True, exist_ok=True)
    partial_file = stored.with_suffix(f".{os.getpid()}.tmp")
    partial_file.write_text(json.dumps(results))
    os.replace(partial_file, stored)  # whole or absent, whoever reads it concurrently
    return results
