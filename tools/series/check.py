"""``check``: the series and each fix alone ``git am`` onto a base pinned by ``patches/BASE``, the
tests it adds are the project's, upstream's hooks pass; ``apply``: commit it into a checkout."""

import os
import re
import tempfile
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, base, hooks, usage
from tools.series.seriesdir import COVER_NAME, NEW

MIRRORED_PREFIX = "test/registered/"  # what the series adds here is the project's copy


def run_check(series) -> list:
    """Report lines; SeriesError (exit 1) naming what failed."""
    version = series.base.version
    report, name = [], f"sglang=={version}"
    with tempfile.TemporaryDirectory(prefix="series-check-") as tmp:
        repo = base.materialize(version, Path(tmp) / "sglang", only=series.touched_files())
        pinned = dict(series.base.files)
        got = base.pins(repo, pinned)
        for path in (path for path in pinned if got[path] != pinned[path]):
            has = "no such file" if got[path] == NEW else got[path]
            raise SeriesError(
                f"base drift: patches/BASE pins {path} as {pinned[path]}, the base has {has}"
            )
        report.append(f"base {name}: pinned files match patches/BASE")
        am_series(series, repo, env=gitcmd.TOOL_IDENTITY)
        report.append(f"{len(series.names)} patches apply to {name} with git am")
        if series.cover is not None:
            said = f"introduces {series.cover.count} patches (not applied by git am)"
            report.append(f"{COVER_NAME}: {said}")
        after = {path: base.blob(repo, path, "HEAD") for path in series.touched_files()}
        report += verify_mirrored_files(series, after) + verify_hooks(repo, after)
        for fix in series.fixes if len(series.fixes) > 1 else ():  # each its own pull request
            gitcmd.run(["reset", "-q", "--hard", base.BASE_TAG], repo)
            try:
                am_series(fix, repo, env=gitcmd.TOOL_IDENTITY)
            except SeriesError as err:
                raise SeriesError(
                    f"fix {fix.number} does not apply without the rest of the series, so it "
                    f"cannot be its own pull request: {err}"
                ) from None
            report.append(f"fix {fix.number} ({', '.join(fix.names)}) applies alone to {name}")
    return report


def am_series(series, repo: Path, env=None) -> None:
    """``git am`` every patch in one session; on failure abort it and raise one line naming
    the patch, the file and the hunk."""
    paths = [str(series.root / name) for name in series.names]
    argv = ["am", "--quiet", "--no-3way", "--keep-non-patch", *paths]
    proc = gitcmd.run(argv, repo, env=env, check=False)
    if proc.returncode == 0:
        return
    output = gitcmd.text(proc)
    gitcmd.run(["am", "--abort"], repo, env=env, check=False)
    failed = re.search(r"^Patch failed at (\d+) ", output, re.M)
    if failed is None:
        raise SeriesError(f"git am failed before naming a patch: {output.strip()}")
    patch = series.patches[int(failed.group(1)) - 1]
    raise SeriesError(
        f"the series does not apply ({patch.name} failed; git am aborted, nothing applied): "
        + "; ".join(explain(output, patch))
    )


def apply_to(series, path) -> list:
    """The series (or one fix) committed into the upstream checkout at ``path``; refused,
    nothing changed, when it is dirty or any of it is already applied."""
    repo = Path(path).resolve()
    if not (repo / "python" / "sglang").is_dir() or not gitcmd.is_top(repo):
        raise usage(
            f"{repo} is not an upstream sglang checkout (a git work tree with python/sglang/)"
        )
    if dirty := gitcmd.dirty_paths(repo):
        raise SeriesError(
            f"{repo} has uncommitted changes; commit or stash them first: {', '.join(dirty[:10])}"
        )
    reverse = ["apply", "--check", "-R"]
    applied = [n for n in series.names if gitcmd.ok([*reverse, str(series.root / n)], repo)]
    if applied:
        missing = [name for name in series.names if name not in applied]
        state = f"partly patched ({', '.join(applied)} applied, {', '.join(missing)} not)"
        raise SeriesError(
            f"{repo} {state if missing else 'already has the series applied'}; nothing changed"
        )
    env = None if gitcmd.ok(["config", "user.email"], repo) else gitcmd.TOOL_IDENTITY
    try:
        am_series(series, repo, env=env)
    except SeriesError as err:
        raise SeriesError(f"{err}; {repo} is unchanged") from None
    return [f"{name}: committed in {repo}" for name in series.names]


_FAILED = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
_OTHERS = {  # what git says of a path -> what it means
    r"^error: (.+?): (?:does not exist in index|No such file or directory)$":
        "the file does not exist in the target",
    r"^error: (.+?): already exists in (?:index|working directory)$":
        "the file it adds already exists in the target",
}  # fmt: skip
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+\S+ @@(.*)$", re.M)


def hunk_at(data: bytes, path: str, line: int):
    """The hunk of ``path`` that git means by 'patch failed: PATH:LINE' (its old start, or a
    line after it at an offset: the nearest start at or before it), described; or None."""
    section = data.partition(f"diff --git a/{path} b/{path}\n".encode())[2]
    hunks = _HUNK.findall(section.split(b"\ndiff --git ", 1)[0])
    if not hunks:
        return None
    index = max((i for i, hunk in enumerate(hunks) if int(hunk[0]) <= line), default=0)
    start, length, where = (part.decode("utf-8", "replace").strip() for part in hunks[index])
    return f"hunk #{index + 1} @@ -{start},{length or 1} @@" + (f" ({where})" if where else "")


def explain(output: str, patch) -> list:
    """One line per problem git reported for ``patch`` (a ``seriesdir.Patch``)."""
    problems = []
    for path, line in _FAILED.findall(output):
        where = hunk_at(patch.data, path, int(line)) or f"the hunk at line {line}"
        problems.append(f"{patch.name}: {path}: {where} does not apply")
    for pattern, meaning in _OTHERS.items():
        problems += [f"{patch.name}: {p}: {meaning}" for p in re.findall(pattern, output, re.M)]
    if not problems:
        said = [line for line in output.splitlines() if line.strip()] or ["no output"]
        detail = next((ln for ln in said if ln.startswith(("error:", "fatal:"))), said[-1])
        problems.append(f"{patch.name}: does not apply ({detail})")
    return problems


def verify_mirrored_files(series, after: dict) -> list:
    """Each file the series adds under ``MIRRORED_PREFIX`` equals the project's copy; ``after``:
    each path's bytes in the commit, so a link the series adds is compared as a link."""
    report = []
    for path in (p for p in after if p.startswith(MIRRORED_PREFIX)):
        ours = series.root.parent / path
        if not ours.is_file():
            raise SeriesError(f"the series adds {path}, but the project has no such file")
        expected, actual = ours.read_bytes(), after[path] or b""
        if expected != actual:
            owner = next(p.name for p in series.patches if any(f[0] == path for f in p.files))
            lines = expected.splitlines(keepends=True), actual.splitlines(keepends=True)
            same = len(os.path.commonprefix(lines))
            longer = " (one file is longer)" if same == min(map(len, lines)) else ""
            raise SeriesError(
                f"{owner} carries a {path} that differs from the project's file (first "
                f"difference at line {same + 1}{longer}); re-create the commit from the "
                "project's file and run refresh"
            )
        report.append(f"{path}: identical to the project's file")
    return report


def verify_hooks(repo: Path, after: dict) -> list:
    """Upstream's pinned hooks on the series' files (``after``: their bytes in the commits, a
    link the series adds is its text); SeriesError on a failure the series brought in."""
    patched, before = {}, {}
    for path, data in after.items():
        if data is not None:  # None: deleted
            patched[path], before[path] = data, base.blob(repo, path)
    report, failures = hooks.check_files(patched, before)
    if failures:
        raise SeriesError(
            "upstream's pre-commit hooks fail on what the series changes:\n  "
            + "\n  ".join(failures)
        )
    return report
