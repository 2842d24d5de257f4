"""``apply --to [--fix N]``: put the series, or one fix of it, into a user's upstream checkout
(``git am``, each patch a commit) or an installed sglang package (``git apply`` with
``python/sglang/`` stripped, files with no place there skipped with a message). Already or
partly applied, dirty or not applying means a refusal and no change.
"""

import base64
import hashlib
import os
from importlib.metadata import PathDistribution
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, check, usage

UPSTREAM_PACKAGE = "python/sglang/"  # where a checkout keeps what site-packages/sglang/ holds


def apply_to(series, path, fix=None) -> list:
    """Apply the series, or only ``fix`` (a ``seriesdir.Fix``: one pull request's branch)."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise usage(f"{path} is not a directory")
    if (path / "python" / "sglang").is_dir():
        if not gitcmd.is_top(path):
            raise usage(f"{path} has python/sglang/ but is not the top of a git checkout")
        return _apply_checkout(series if fix is None else series.alone(fix), path)
    for candidate in (path, path / "sglang"):
        if (candidate / "__init__.py").is_file() and (candidate / "srt").is_dir():
            selected = series if fix is None else series.alone(fix)
            return _apply_package(selected, candidate)
    raise usage(
        f"{path} is neither an upstream sglang checkout (a git work tree with python/sglang/) "
        "nor an installed sglang package (site-packages/sglang)"
    )


def _refuse_if_applied(states, where):
    applied = [name for name, is_applied in states if is_applied]
    if not applied:
        return
    if len(applied) == len(states):
        raise SeriesError(f"{where} already has the series applied; nothing changed")
    missing = [name for name, is_applied in states if not is_applied]
    raise SeriesError(
        f"{where} is partly patched ({', '.join(applied)} already applied, "
        f"{', '.join(missing)} not); nothing changed. Start from a pristine tree."
    )


def _apply_checkout(series, repo: Path) -> list:
    dirty = gitcmd.dirty_paths(repo)
    if dirty:
        shown = "\n  ".join(dirty[:10]) + ("\n  ..." if len(dirty) > 10 else "")
        raise SeriesError(f"{repo} has uncommitted changes; commit or stash them first:\n  {shown}")
    states = [
        (name, gitcmd.ok(["apply", "--check", "-R", str(patch)], repo))
        for name, patch in zip(series.names, series.paths(), strict=True)
    ]
    _refuse_if_applied(states, str(repo))
    env = None if gitcmd.ok(["config", "user.email"], repo) else gitcmd.TOOL_IDENTITY
    try:
        check.am_series(series, repo, env=env)
    except SeriesError as err:
        raise SeriesError(f"{err}\n{repo} is unchanged") from None
    return [f"{name}: committed in {repo}" for name in series.names]


def _package_plan(series):
    """Per patch: the package-relative files it changes there, and the files it skips."""
    plan = []
    for name, patch in zip(series.names, series.patches, strict=True):
        mapped, skipped = [], []
        for path, _ in patch.files:
            relative = path.removeprefix(UPSTREAM_PACKAGE)
            (skipped if relative == path else mapped).append(relative)
        plan.append((name, mapped, skipped))
    return plan


def _git_apply(package: Path, patch_paths, files, extra=()):
    # -p3 strips a/python/sglang/: the paths git sees are package-relative.
    includes = [f"--include={relative}" for relative in sorted(set(files))]
    return gitcmd.run(
        ["apply", "-p3", *includes, *extra, *map(str, patch_paths)],
        package,
        check=False,
        ceiling=package.parent,
    )


def _apply_package(series, package: Path) -> list:
    report, work = [], []
    plan = zip(_package_plan(series), series.paths(), series.patches, strict=True)
    for (name, mapped, skipped), patch_path, patch in plan:
        report += [
            f"{name}: skipped {p} (no place for it in an installed package)" for p in skipped
        ]
        if mapped:
            work.append((name, mapped, patch_path, patch))
        else:
            report.append(f"{name}: nothing to apply in an installed package, skipped")
    if not work:
        return report
    states = [
        (name, _git_apply(package, [path], mapped, ["--check", "-R"]).returncode == 0)
        for name, mapped, path, _ in work
    ]
    _refuse_if_applied(states, str(package))
    files = [relative for _, mapped, _, _ in work for relative in mapped]
    modified = _modified_since_install(package, files)
    if modified:
        raise SeriesError(
            f"{package} has files that differ from the installed distribution's RECORD "
            f"(edited by hand or by another patch); nothing changed:\n  " + "\n  ".join(modified)
        )
    paths = [path for _, _, path, _ in work]
    # git apply writes each patch file once it checks, so check them all first: all or none.
    if _git_apply(package, paths, files, ["--check"]).returncode != 0:
        raise SeriesError(
            f"{package}: the series does not apply; nothing changed:\n  "
            + "\n  ".join(_locate(package, work))
        )
    proc = _git_apply(package, paths, files)
    if proc.returncode != 0:
        raise SeriesError(f"git apply failed after a clean check:\n{gitcmd.text(proc).strip()}")
    return report + [
        f"{name}: patched {package / relative}"
        for name, mapped, _, _ in work
        for relative in mapped
    ]


def _locate(package: Path, work) -> list:
    """Which patch, file and hunk fail, checking the patches one by one."""
    for _name, mapped, path, patch in work:
        proc = _git_apply(package, [path], mapped, ["--check", "-v"])
        if proc.returncode != 0:
            return check.explain(gitcmd.text(proc), patch, prefix=UPSTREAM_PACKAGE)
    return ["the patches conflict with each other when applied together"]


def _modified_since_install(package: Path, relatives) -> list:
    """Files whose bytes differ from the dist-info RECORD next to the package (if any)."""
    dist_infos = sorted(package.parent.glob("sglang-*.dist-info"))
    if not dist_infos or package.name != "sglang":
        return []
    files = PathDistribution(dist_infos[0]).files or []
    recorded = {str(f): f.hash.value for f in files if f.hash and f.hash.mode == "sha256"}
    modified = []
    for relative in relatives:
        expected, target = recorded.get(f"sglang/{relative}"), package / relative
        if expected is None or not target.is_file():
            continue
        digest = hashlib.sha256(target.read_bytes()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != expected:
            modified.append(os.fspath(target))
    return modified
