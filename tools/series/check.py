"""``check``: the series applies with ``git am`` to a fresh base whose files still hash to
``patches/BASE``, every file it adds under ``test/registered/`` is the project's copy byte for
byte, and upstream sglang's pinned hooks (``HOOKS``, run by pre-commit on scratch copies) pass
where the series changed something (patches/README.md). Not for applying to a user's tree.
"""

import os
import re
import tempfile
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, base, hooks
from tools.series.seriesdir import COVER_NAME, NEW

# Files the series adds under this prefix must equal the project's copy byte for byte.
MIRRORED_PREFIX = "test/registered/"


def run_check(series, version=None) -> list:
    """Report lines; SeriesError (exit 1) naming what failed. Each fix must also apply alone to
    the base: it goes upstream as its own pull request. ``version``: another release to check
    against than patches/BASE's (its pinned hashes are then not compared)."""
    version = version or series.base.version
    report, name = [], f"sglang=={version}"
    with tempfile.TemporaryDirectory(prefix="series-check-") as tmp:
        repo = base.materialize(version, Path(tmp) / "sglang", only=series.touched_files())
        if version == series.base.version:
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
    """Each file the series adds under ``MIRRORED_PREFIX`` equals the project's copy; read from
    the commit, so a link the series adds is compared as a link, never followed."""
    report = []
    for path in series.touched_files():
        if not path.startswith(MIRRORED_PREFIX):
            continue
        ours = series.root.parent / path
        if not ours.is_file():
            raise SeriesError(f"the series adds {path}, but the project has no such file")
        expected, actual = ours.read_bytes(), base.commit_blob(repo, "HEAD", path) or b""
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
    """Upstream's pinned hooks on the series' files in ``repo`` (applied on the ``base`` tag);
    SeriesError on a failure the series brought in. Files are read from the commits, never the
    work tree: a link the series adds is its text, not the file it points to."""
    patched, before = {}, {}
    for path in series.touched_files():
        after = base.commit_blob(repo, "HEAD", path)
        if after is not None:  # None: the series deletes it
            patched[path], before[path] = after, base.blob(repo, path)
    report, failures = hooks.check_files(patched, before)
    if failures:
        raise SeriesError(
            "upstream's pre-commit hooks fail on what the series changes:\n  "
            + "\n  ".join(failures)
        )
    return report
