"""``refresh --from DIR``: rewrite ``patches/`` from the commits on top of ``base`` in a
repository made by ``materialize``, where the patches were applied with ``git am``, edited and
committed. Patch N keeps the file name the series gave it (a commit beyond the old series gets
git's); ``BASE`` is re-pinned to the sha256 of every base file the series touches; an existing
cover letter keeps its subject and blurb and gets git's shortlog and diffstat anew. The output
does not depend on the user's git configuration. Not for editing commits: use git in DIR.
"""

import hashlib
import tempfile
from pathlib import Path

from series import SeriesError, base, gitcmd, seriesdir, usage
from series.seriesdir import COVER_NAME

# Options that keep the output independent of the user's git config and git version.
FORMAT_PATCH = (
    "-c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.renames=false format-patch "
    "--quiet --zero-commit --no-signature --no-color --src-prefix=a/ --dst-prefix=b/ --full-index"
).split()


def refresh(patches_dir, source) -> list:
    patches_dir, source = Path(patches_dir), Path(source).resolve()
    if not gitcmd.is_work_tree(source):
        raise usage(f"{source} is not a git checkout made by 'materialize'")
    version = base.base_version(source)
    if not gitcmd.ok(["rev-parse", "-q", "--verify", f"refs/tags/{base.BASE_TAG}"], source):
        raise usage(f"{source} has no '{base.BASE_TAG}' tag marking the pristine release")
    dirty = gitcmd.dirty_paths(source)
    if dirty:
        raise SeriesError(f"{source} has uncommitted changes; commit them first: {dirty[:5]}")
    count = int(gitcmd.out(["rev-list", "--count", f"{base.BASE_TAG}..HEAD"], source))
    if count == 0:
        raise SeriesError(f"{source} has no commits on top of '{base.BASE_TAG}'")
    series_file = patches_dir / "series"
    old_names = seriesdir.parse_series(series_file.read_text()) if series_file.is_file() else []
    letter = _current_cover(patches_dir)
    command, env = _format_patch_command(source, letter)
    with tempfile.TemporaryDirectory(prefix="series-refresh-") as tmp:
        gitcmd.run([*command, "-o", tmp, f"{base.BASE_TAG}..HEAD"], source, env=env)
        generated = sorted(p for p in Path(tmp).glob("*.patch") if p.name != COVER_NAME)
        names = [
            old_names[i] if i < len(old_names) else path.name for i, path in enumerate(generated)
        ]
        patches_dir.mkdir(parents=True, exist_ok=True)
        report, patches = [], []
        for name, path in zip(names, generated, strict=True):
            data = path.read_bytes()
            patch = seriesdir.parse_patch(data, name)  # never write what we cannot read back
            patches.append(patch)
            target = patches_dir / name
            changed = not target.is_file() or target.read_bytes() != data
            target.write_bytes(data)
            report.append(f"{name}: {'updated' if changed else 'unchanged'} ({patch.subject})")
        if letter is not None:
            report.append(_write_cover(Path(tmp) / COVER_NAME, patches_dir, source))
    for stale in set(old_names) - set(names):
        (patches_dir / stale).unlink(missing_ok=True)
        report.append(f"{stale}: removed (no matching commit)")
    series_file.write_text(seriesdir.render_series(names))
    (patches_dir / "BASE").write_text(seriesdir.render_base(_pin(source, version, patches)))
    return report


def _current_cover(patches_dir: Path):
    """The hand-written subject and blurb of the existing cover letter, or None."""
    path = patches_dir / COVER_NAME
    if not path.is_file():
        return None
    try:
        return seriesdir.parse_cover(path.read_bytes(), COVER_NAME)
    except seriesdir.CoverError as err:
        raise SeriesError(f"corrupt cover letter, fix it before refreshing: {err}") from None


def _format_patch_command(source: Path, letter):
    """format-patch, plus --cover-letter fed from ``letter`` through a branch description.

    The cover letter's From is the committer's identity: use the first commit's author, so
    the output does not depend on who runs refresh.
    """
    if letter is None:
        return FORMAT_PATCH, None
    proc = gitcmd.run(["symbolic-ref", "-q", "--short", "HEAD"], source, check=False)
    branch = gitcmd.text(proc).strip()
    if proc.returncode != 0 or not branch:
        raise usage(f"{source} has a detached HEAD; check out a branch to refresh the cover letter")
    first = gitcmd.out(
        ["log", "--reverse", "--format=%an%x00%ae", f"{base.BASE_TAG}..HEAD"], source
    )
    name, _, email = first.splitlines()[0].partition("\0")
    command = ["-c", f"branch.{branch}.description={letter.description()}", *FORMAT_PATCH]
    command += ["--cover-letter", "--cover-from-description=subject"]
    return command, {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def _write_cover(generated: Path, patches_dir: Path, source: Path) -> str:
    # Dated like the newest commit, not the moment of the refresh: same commits, same bytes.
    date = gitcmd.out(["log", "-1", "--format=%aD", "HEAD"], source)
    data = seriesdir.pin_date(generated.read_bytes(), date)
    letter = seriesdir.parse_cover(data, COVER_NAME)  # never write what we cannot read back
    target = patches_dir / COVER_NAME
    changed = target.read_bytes() != data
    target.write_bytes(data)
    return f"{COVER_NAME}: {'updated' if changed else 'unchanged'} ({letter.subject})"


def _pin(source: Path, version: str, patches) -> seriesdir.Base:
    files = {}
    for path in dict.fromkeys(path for patch in patches for path, _ in patch.files):
        blob = gitcmd.run(["cat-file", "blob", f"{base.BASE_TAG}:{path}"], source, check=False)
        files[path] = (
            hashlib.sha256(blob.stdout).hexdigest() if blob.returncode == 0 else seriesdir.NEW
        )
    return seriesdir.Base(version, tuple(files.items()))
