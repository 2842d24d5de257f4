"""``check``: does the whole series still apply to a fresh base, and is its test the project's?

Materialises the pinned (or a given) release, verifies the base files still hash to what
``patches/BASE`` recorded, runs ``git am`` over the series and aborts on failure so nothing is
left half-applied, then compares every file the series adds under ``test/registered/`` with
the project's copy byte for byte, and runs upstream's pinned pre-commit hooks on every file
the series touches (``hooks``). Not for applying to a user's tree (``apply``).
"""

import hashlib
import tempfile
from pathlib import Path

from series import base, failures, gitcmd, hooks
from series.cover import COVER_NAME
from series.errors import SeriesError
from series.pins import NEW
from series.seriesdir import MIRRORED_PREFIX


def run_check(series, version=None) -> list:
    """Return report lines; raise SeriesError (exit 1) naming what failed."""
    version = version or series.base.version
    report = []
    with tempfile.TemporaryDirectory(prefix="series-check-") as tmp:
        repo = base.materialize(version, Path(tmp) / "sglang")
        if version == series.base.version:
            verify_base_hashes(series, repo)
            report.append(f"base sglang=={version}: pinned files match patches/BASE")
        am_series(series, repo, env=gitcmd.TOOL_IDENTITY)
        report.append(f"{len(series.names)} patches apply to sglang=={version} with git am")
        if series.cover is not None:
            report.append(
                f"{COVER_NAME}: introduces {series.cover.count} patches (not applied by git am)"
            )
        report.extend(verify_mirrored_files(series, repo))
        report.extend(hooks.verify(series, repo, base.BASE_TAG))
    return report


def verify_base_hashes(series, repo: Path) -> None:
    for path, digest in series.base.files:
        target = repo / path
        if digest == NEW:
            if target.exists():
                raise SeriesError(f"patches/BASE says {path} is new, but the base has it")
            continue
        if not target.is_file():
            raise SeriesError(f"patches/BASE pins {path}, but the base has no such file")
        actual = hashlib.sha256(target.read_bytes()).hexdigest()
        if actual != digest:
            raise SeriesError(f"base drift: {path} has sha256 {actual}, patches/BASE pins {digest}")


def am_series(series, repo: Path, env=None) -> None:
    """``git am`` every patch in one session; on failure abort it and explain."""
    proc = gitcmd.run(
        ["am", "--quiet", "--no-3way", "--keep-non-patch", *map(str, series.paths())],
        repo,
        env=env,
        check=False,
    )
    if proc.returncode == 0:
        return
    output = gitcmd.text(proc)
    gitcmd.run(["am", "--abort"], repo, env=env, check=False)
    index = failures.failing_patch_index(output)
    if index is None:
        raise SeriesError(f"git am failed before naming a patch:\n{output.strip()}")
    problems = failures.explain(output, series.patches[index])
    raise SeriesError(
        f"the series does not apply ({series.names[index]} failed; git am aborted, "
        "nothing applied):\n  " + "\n  ".join(problems)
    )


def verify_mirrored_files(series, repo: Path) -> list:
    report = []
    for path in series.touched_files():
        if not path.startswith(MIRRORED_PREFIX):
            continue
        ours = series.project_root / path
        theirs = repo / path
        if not ours.is_file():
            raise SeriesError(f"the series adds {path}, but the project has no such file")
        expected, actual = ours.read_bytes(), theirs.read_bytes()
        if expected != actual:
            owner = next(p.name for p in series.patches if any(d.path == path for d in p.files))
            raise SeriesError(
                f"{owner} carries a {path} that differs from the project's file "
                f"(first difference at {failures.first_difference(expected, actual)}); "
                "re-create the commit from the project's file and run refresh"
            )
        report.append(f"{path}: identical to the project's file")
    return report
