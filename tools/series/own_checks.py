"""What an upstream checkout itself runs on a pull request, run by ``check`` on a checkout base
(``--checkout``) in the materialised tree with the series applied: the checkout's own
``.pre-commit-config.yaml`` hooks on the files the series touches (a hook failure counts where
the series brought it in, as for the pinned hooks in ``check``), and its own
``test/run_suite.py`` collector on the registered files the series adds. Upstream's
``test/run_suite.py`` (read at sgl-project/sglang 000853484b65) has no dry mode: it globs
``test/registered/**/*.py``, calls ``collect_tests(files, sanity_check=True)`` (imported from
``sglang.test.ci.ci_register``) and then its own ``validate_all_suites``, and runs the files.
So the checkout's module is loaded, in a child Python with the tree's ``python/`` first, and
those two are called on each file alone, so that a rejection names its file. A checkout without
the config or the script gets one line saying so.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from ci.evidence.inert import inert, printable
from tools.series import SeriesError, base, gitcmd, usage
from tools.series.hookdiff import introduced

OWN_CONFIG = ".pre-commit-config.yaml"
RUN_SUITE = "test/run_suite.py"
REGISTERED = "test/registered/"  # where upstream's runner globs its files
_SKIPPED_TESTS = ("/conftest.py", "/__init__.py")  # what upstream's glob leaves out
_STATUS = re.compile(r"^(.+?)\.+(?:\(no files to check\))?(Passed|Failed|Skipped)$")
_NOT_OUTPUT = ("- exit code: ", "- files were modified", "- duration: ")
# Run in the child: argv = [tree, file...]; one JSON line per file.
_COLLECT = """
import importlib.util, json, os, sys
tree, files = sys.argv[1], sys.argv[2:]
sys.path[:0] = [os.path.join(tree, "python"), os.path.join(tree, "test")]
spec = importlib.util.spec_from_file_location("run_suite", os.path.join(tree, "test", "run_suite.py"))
module = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(module)
    collect = module.collect_tests
except (Exception, SystemExit) as err:
    print(json.dumps({"load": f"{type(err).__name__}: {err}"}))
    sys.exit(0)
validate = getattr(module, "validate_all_suites", None)
for name in files:
    try:
        registries = collect([os.path.join(tree, name)], sanity_check=True)
        if validate is not None:
            validate(registries)
        print(json.dumps({"file": name, "registries": len(registries)}))
    except (Exception, SystemExit) as err:
        print(json.dumps({"file": name, "error": f"{type(err).__name__}: {err}"}))
"""


def run(series, repo: Path, where: str) -> list:
    """Report lines of both checks in ``repo`` (HEAD: the series on ``base``); SeriesError
    (exit 1) in one line naming the hook and file, or the file the collector rejects."""
    return [*hooks(series, repo, where), *collector(series, repo, where)]


def _one_line(text: str, limit: int = 300) -> str:
    """The first line of what the checkout's code said, made inert: its code is anyone's."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
    shown = printable(line)
    return inert(shown if len(shown) <= limit else shown[: limit - 3] + "...")


def hooks(series, repo: Path, where: str) -> list:
    if not (repo / OWN_CONFIG).is_file():
        return [f"{where} has no {OWN_CONFIG}: no hooks of its own to run"]
    files = [path for path in series.touched_files() if (repo / path).is_file()]
    passed, failed = _pre_commit(repo, files)
    if not failed:
        shown = _one_line(", ".join(passed))
        return [f"{where}: its own hooks ({OWN_CONFIG}) pass on {len(files)} files: {shown}"]
    report, problems = [], []
    for hook, output in failed.items():
        lines, found = _judge(repo, hook, files, where)
        if not lines and not found:  # it fails only on the files together
            found = [f"{_one_line(hook)} fails on the series' files together: {_one_line(output)}"]
        report, problems = report + lines, problems + found
    if problems:
        raise SeriesError(f"{where}: its own pre-commit hook " + "; ".join(problems))
    return report


def _judge(repo: Path, hook: str, files: list, where: str) -> tuple:
    """Hook ``hook`` on each file alone, with the series and as the base has it: a problem is
    one it reports with the series that it does not report on the base."""
    head = gitcmd.out(["rev-parse", "HEAD"], repo)
    after = {path: _pre_commit(repo, [path], hook) for path in files}
    olds = [path for path in files if base.blob(repo, path) is not None]
    gitcmd.run(["checkout", "-q", "--detach", base.BASE_TAG], repo)
    try:
        before = {path: _pre_commit(repo, [path], hook) for path in olds}
    finally:
        gitcmd.run(["checkout", "-q", "-f", "--detach", head], repo)
    report, problems = [], []
    for path, (_, failed) in after.items():
        if hook not in failed:
            continue
        if path in before and hook in before[path][1]:
            added = introduced(before[path][1][hook], failed[hook])
            if not added:
                shown = _one_line(hook)
                report.append(f"{where}: its own hook {shown} fails on {path} as the base has it")
                continue
        else:  # a file the series adds: everything the hook says
            added = introduced("", failed[hook]) or [failed[hook]]
        problems.append(f"{_one_line(hook)} fails on {path}: {_one_line(chr(10).join(added))}")
    return report, problems


def _pre_commit(repo: Path, files: list, only: str | None = None) -> tuple:
    """pre-commit with the checkout's config on ``files`` in ``repo``: (ids of the hooks that
    passed, {id of a failed hook: its output}); the tree is reset afterwards (fixers edit)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "SKIP" and not k.startswith(("GIT_", "PRE_COMMIT"))
    }
    env["PRE_COMMIT_HOME"] = str(base.HOOKS_CACHE_DIR / "checkout-hooks")
    command = [sys.executable, "-m", "pre_commit", "run", *([only] if only else [])]
    command += ["--color", "never", "--verbose", "--files", *files]
    try:
        proc = subprocess.run(
            command, cwd=repo, env=env, capture_output=True, text=True, timeout=1800
        )
        # What a fixer hook changed is its complaint (it may print nothing): as a diff, whose
        # lines the judging compares before and after the series.
        edits = gitcmd.text(gitcmd.run(["diff", "--no-color", "-U0"], repo)) if only else ""
    except subprocess.TimeoutExpired:
        raise SeriesError(f"the checkout's {OWN_CONFIG} hooks ran past 30 minutes") from None
    finally:
        gitcmd.run(["reset", "-q", "--hard"], repo)
        gitcmd.run(["clean", "-q", "-fd"], repo)
    passed, failed, status, current = [], {}, None, None
    for line in proc.stdout.splitlines():
        match = _STATUS.match(line)
        if match:
            status, current = match.group(2), None
        elif line.startswith("- hook id: ") and status is not None:
            current = line.removeprefix("- hook id: ").strip()
            if status == "Passed":
                passed.append(current)
            elif status == "Failed":
                failed[current] = []
        elif current in failed and not line.startswith(_NOT_OUTPUT):
            failed[current].append(line)
    if proc.returncode != 0 and not failed:
        said = _one_line(proc.stdout + proc.stderr)
        raise usage(f"could not run the checkout's {OWN_CONFIG} with pre-commit: {said}")
    if only in failed and edits.strip():
        failed[only].append(edits)
    return passed, {hook: "\n".join(lines).strip() for hook, lines in failed.items()}


def registered_files(series) -> list:
    """The registered test files the series adds, as upstream's runner would glob them."""
    return [
        path
        for path, added in series.touched_files().items()
        if added
        and path.startswith(REGISTERED)
        and path.endswith(".py")
        and not path.endswith(_SKIPPED_TESTS)
    ]


def collector(series, repo: Path, where: str) -> list:
    if not (repo / RUN_SUITE).is_file():
        return [f"{where} has no {RUN_SUITE}: no collector of its own to run"]
    files = registered_files(series)
    proc = subprocess.run(
        [sys.executable, "-c", _COLLECT, str(repo), *files],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not rows or "load" in rows[0]:
        said = rows[0]["load"] if rows and "load" in rows[0] else _one_line(proc.stderr)
        raise usage(f"{where}: its own {RUN_SUITE} cannot be loaded to collect tests: {said}")
    rejected = [f"{row['file']}: {_one_line(row['error'])}" for row in rows if "error" in row]
    if rejected:
        raise SeriesError(f"{where}: its own {RUN_SUITE} rejects " + "; ".join(rejected))
    count = sum(row["registries"] for row in rows)
    return [f"{where}: its own {RUN_SUITE} collects {len(rows)} files ({count} registrations)"]
