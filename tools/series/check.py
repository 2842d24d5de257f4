"""``check``: the series applies with ``git am`` to a fresh base whose files still hash to
``patches/BASE``, every file it adds under ``test/registered/`` is the project's copy byte for
byte, and upstream sglang's pinned hooks (``HOOKS``, run by pre-commit on scratch copies) pass
where the series changed something (patches/README.md). Not for applying to a user's tree.
"""

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
from tools.series import SeriesError, base, basearg, usage
from tools.series.hookdiff import introduced, problem_lines  # noqa: F401 (check's API)
from tools.series.seriesdir import COVER_NAME, NEW

# Files the series adds under this prefix must equal the project's copy byte for byte.
MIRRORED_PREFIX = "test/registered/"
# (name, command, Python files only), in upstream's settings; a name with a version is its pin,
# the others come from pre-commit-hooks. The tools with a check mode run in it, so their output
# is the diff to make.
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


def run_check(series, where=None) -> list:
    """Return report lines; raise SeriesError (exit 1) naming what failed. With more than one
    fix, each must also apply alone to the base: it goes upstream as its own pull request.
    ``where`` (a ``basearg.Where``; default: patches/BASE's release) is the base: a release, or
    a commit of an upstream git checkout."""
    where = where or basearg.Where(series.base.version)
    report, name = [], where.name
    with tempfile.TemporaryDirectory(prefix="series-check-") as tmp:
        # A release base: only the files the series touches, written.
        repo = where.materialize(Path(tmp) / "sglang", only=series.touched_files())
        pinned = (where.commit or where.version) in (series.base.git, series.base.version)
        if pinned:
            verify_base_hashes(series, repo)
            report.append(f"base {name}: pinned files match patches/BASE")
        am_series(series, repo, env=gitcmd.TOOL_IDENTITY)
        report.append(f"{len(series.names)} patches apply to {name} with git am")
        if series.cover is not None:
            report.append(
                f"{COVER_NAME}: introduces {series.cover.count} patches (not applied by git am)"
            )
        report.extend(verify_mirrored_files(series, repo))
        report.extend(verify_hooks(series, repo))
        if len(series.fixes) > 1:
            report.extend(verify_fixes_alone(series, repo, name))
    return report


def verify_fixes_alone(series, repo: Path, name: str) -> list:
    """``git am`` of each fix's patches alone on the pristine base in ``repo``."""
    report = []
    for fix in series.fixes:
        gitcmd.run(["reset", "-q", "--hard", base.BASE_TAG], repo)
        try:
            am_series(series.alone(fix), repo, env=gitcmd.TOOL_IDENTITY)
        except SeriesError as err:
            raise SeriesError(
                f"fix {fix.number} does not apply without the rest of the series, so it "
                f"cannot be its own pull request: {err}"
            ) from None
        report.append(f"fix {fix.number} ({', '.join(fix.names)}) applies alone to {name}")
    return report


def verify_base_hashes(series, repo: Path) -> None:
    actual = base.pins(repo, [path for path, _ in series.base.files])
    for path, digest in series.base.files:
        if actual[path] == digest:
            continue
        if digest == NEW:
            raise SeriesError(f"patches/BASE says {path} is new, but the base has it")
        if actual[path] == NEW:
            raise SeriesError(f"patches/BASE pins {path}, but the base has no such file")
        raise SeriesError(
            f"base drift: {path} has sha256 {actual[path]}, patches/BASE pins {digest}"
        )


def am_series(series, repo: Path, env=None) -> None:
    """``git am`` every patch in one session; on failure abort it and explain."""
    am_patches(list(zip(series.names, series.paths(), series.patches, strict=True)), repo, env)


def am_patches(patches, repo: Path, env=None) -> None:
    """``git am`` the (name, path, Patch) ``patches`` in one session; on failure abort it and
    explain."""
    proc = gitcmd.run(
        ["am", "--quiet", "--no-3way", "--keep-non-patch", *(str(p) for _, p, _ in patches)],
        repo,
        env=env,
        check=False,
    )
    if proc.returncode == 0:
        return
    output = gitcmd.text(proc)
    gitcmd.run(["am", "--abort"], repo, env=env, check=False)
    failed = re.search(r"^Patch failed at (\d+) ", output, re.M)
    if failed is None:
        raise SeriesError(f"git am failed before naming a patch:\n{output.strip()}")
    name, _, patch = patches[int(failed.group(1)) - 1]
    problems = explain(output, patch)
    # One line, whatever git said: the patch, the file and the hunk.
    raise SeriesError(
        f"the series does not apply ({name} failed; git am aborted, nothing applied): "
        + "; ".join(problems)
    )


_FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
_MISSING = re.compile(
    r"^error: (.+?): (?:does not exist in index|No such file or directory)$", re.M
)
_EXISTS = re.compile(r"^error: (.+?): already exists in (?:index|working directory)$", re.M)
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+\S+ @@(.*)$", re.M)


def hunk_at(data: bytes, path: str, line: int):
    """The hunk of ``path`` in patch ``data`` that git means by 'patch failed: PATH:LINE',
    described; None when the patch has no hunk there. LINE is the hunk's old start, or a line
    after it when git searched at an offset: the nearest start at or before it wins."""
    section = data.partition(f"diff --git a/{path} b/{path}\n".encode())[2]
    hunks = _HUNK.findall(section.split(b"\ndiff --git ", 1)[0])
    if not hunks:
        return None
    index = max((i for i, hunk in enumerate(hunks) if int(hunk[0]) <= line), default=0)
    start, length, where = (part.decode("utf-8", "replace").strip() for part in hunks[index])
    return f"hunk #{index + 1} @@ -{start},{length or 1} @@" + (f" ({where})" if where else "")


def explain(output: str, patch, prefix: str = "") -> list:
    """One line per problem git reported for ``patch`` (a ``seriesdir.Patch``); ``prefix`` maps
    the paths git printed back to upstream paths (``python/sglang/`` for an installed package).
    """
    problems = []
    for path, line in _FAILED_AT.findall(output):
        where = hunk_at(patch.data, prefix + path, int(line)) or f"the hunk at line {line}"
        problems.append(f"{patch.name}: {prefix + path}: {where} does not apply")
    for path in _MISSING.findall(output):
        problems.append(f"{patch.name}: {prefix + path}: the file does not exist in the target")
    for path in _EXISTS.findall(output):
        problems.append(
            f"{patch.name}: {prefix + path}: the file it adds already exists in the target"
        )
    if not problems:
        detail = next(
            (ln for ln in output.splitlines() if ln.startswith(("error:", "fatal:"))),
            output.strip().splitlines()[-1] if output.strip() else "no output",
        )
        problems.append(f"{patch.name}: does not apply ({detail})")
    return problems


def verify_mirrored_files(series, repo: Path) -> list:
    report = []
    for path in series.touched_files():
        if not path.startswith(MIRRORED_PREFIX):
            continue
        ours = series.root.parent / path
        if not ours.is_file():
            raise SeriesError(f"the series adds {path}, but the project has no such file")
        expected, actual = ours.read_bytes(), (repo / path).read_bytes()
        if expected != actual:
            owner = next(p.name for p in series.patches if any(f[0] == path for f in p.files))
            raise SeriesError(
                f"{owner} carries a {path} that differs from the project's file "
                f"(first difference at {first_difference(expected, actual)}); "
                "re-create the commit from the project's file and run refresh"
            )
        report.append(f"{path}: identical to the project's file")
    return report


def first_difference(expected: bytes, actual: bytes) -> str:
    """Where two different files first differ, as 'line N'."""
    a_lines, b_lines = expected.splitlines(keepends=True), actual.splitlines(keepends=True)
    same = len(os.path.commonprefix([a_lines, b_lines]))
    longer = " (one file is longer)" if same == min(len(a_lines), len(b_lines)) else ""
    return f"line {same + 1}{longer}"


def verify_hooks(series, repo: Path) -> list:
    """Upstream's hooks on the series' files in ``repo``, where it is applied on ``base``;
    raise on a failure the series introduced."""
    patched, before = {}, {}
    for path in series.touched_files():
        if not (repo / path).is_file():
            continue  # the series deletes it
        patched[path] = (repo / path).read_bytes()
        before[path] = base.blob(repo, path)
    report, failures = check_files(patched, before)
    if failures:
        raise SeriesError(
            "upstream's pre-commit hooks fail on what the series changes:\n  "
            + "\n  ".join(failures)
        )
    return report


def check_files(patched: dict, before: dict) -> tuple:
    """(report lines, failures) of every hook on ``patched`` (upstream path -> bytes after the
    series), with ``before`` the bytes in the base (None: added); one pre-commit run for all
    files, then a hook that fails there is judged file by file (``_judge``)."""
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
    """Hook ``name`` again on each file alone, after the series and as the base has it: a
    failure is a problem it reports after that it does not report before."""
    olds = [path for path in patched if before.get(path) is not None]
    runs = [{path: data} for path, data in patched.items()] + [{p: before[p]} for p in olds]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = [r[name] for r in pool.map(partial(_run_hooks, home, only=name), runs)]
    on_base = dict(zip(olds, results[len(patched) :], strict=True))
    report, failures = [], []
    for path, (ok, output) in zip(patched, results, strict=False):
        base_ok, base_output = on_base.get(path, (True, ""))
        added = [] if ok or base_ok else introduced(base_output, output)
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
    """The ``.pre-commit-config.yaml`` of ``HOOKS`` (JSON, which is YAML): local hooks with
    their pins as dependencies, since pre-commit can fetch nothing but packages here."""
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
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "SKIP" and not k.startswith(("GIT_", "PRE_COMMIT"))
    }
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args, "-c", str(home / CONFIG)],
        cwd=cwd,
        env={**env, "PRE_COMMIT_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def ensure_env() -> Path:
    """pre-commit's home for ``HOOKS``, with their environments installed from PyPI the first
    time (pre-commit locks its store against a concurrent install) and never again."""
    if importlib.util.find_spec("pre_commit") is None:
        raise usage("pre-commit is not installed in this Python; 'make install' installs it")
    config = hooks_config()
    home = (
        base.HOOKS_CACHE_DIR / "upstream-hooks" / hashlib.sha256(config.encode()).hexdigest()[:12]
    )
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
    """pre-commit (every hook, or the one named ``only``) on scratch copies of ``files``
    (path -> bytes): {hook name: (passed, output)} for the hooks that ran. Answered from
    ``home``'s store when these hooks already ran on these exact paths and bytes."""
    key = hashlib.sha256(repr((only, sorted(_digests(files).items()))).encode()).hexdigest()
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


def _digests(files: dict) -> dict:
    return {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}


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
