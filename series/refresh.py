"""``refresh --from DIR``: rewrite ``patches/`` from the commits on top of ``base`` in a
repository made by ``materialize`` (patch N keeps its file name, ``BASE`` is re-pinned, the
cover letter keeps its subject and blurb), independent of the user's git configuration.
"""

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
    version = gitcmd.out(["config", base.VERSION_KEY], source, check=False)
    if not version:
        raise usage(
            f"{source} was not made by 'materialize' (no {base.VERSION_KEY} in its git config)"
        )
    if not base.has_base_tag(source):
        raise usage(f"{source} has no '{base.BASE_TAG}' tag marking the pristine release")
    dirty = gitcmd.dirty_paths(source)
    if dirty:
        raise SeriesError(f"{source} has uncommitted changes; commit them first: {dirty[:5]}")
    if gitcmd.out(["rev-list", "--count", f"{base.BASE_TAG}..HEAD"], source) == "0":
        raise SeriesError(f"{source} has no commits on top of '{base.BASE_TAG}'")
    series_file = patches_dir / "series"
    old_names = seriesdir.parse_series(series_file.read_text()) if series_file.is_file() else []
    letter = None
    if (patches_dir / COVER_NAME).is_file():
        try:
            letter = seriesdir.parse_cover((patches_dir / COVER_NAME).read_bytes())
        except seriesdir.CoverError as err:
            raise SeriesError(f"corrupt cover letter, fix it before refreshing: {err}") from None
    command, env = _format_patch_command(source, letter)
    with tempfile.TemporaryDirectory(prefix="series-refresh-") as tmp:
        gitcmd.run([*command, "-o", tmp, f"{base.BASE_TAG}..HEAD"], source, env=env)
        generated = sorted(p for p in Path(tmp).glob("*.patch") if p.name != COVER_NAME)
        names = [*old_names[: len(generated)], *(p.name for p in generated[len(old_names) :])]
        patches_dir.mkdir(parents=True, exist_ok=True)
        report, patches = [], []
        for name, path in zip(names, generated, strict=True):
            data = path.read_bytes()
            patch = seriesdir.parse_patch(data, name)  # never write what we cannot read back
            patches.append(patch)
            report.append(f"{name}: {_write(patches_dir / name, data)} ({patch.subject})")
        if letter is not None:
            # Dated like the newest commit, not the moment of the refresh: same commits, bytes.
            date = gitcmd.out(["log", "-1", "--format=%aD", "HEAD"], source)
            data = seriesdir.pin_date((Path(tmp) / COVER_NAME).read_bytes(), date)
            subject = seriesdir.parse_cover(data).subject  # never write what we cannot read back
            report.append(f"{COVER_NAME}: {_write(patches_dir / COVER_NAME, data)} ({subject})")
    for stale in set(old_names) - set(names):
        (patches_dir / stale).unlink(missing_ok=True)
        report.append(f"{stale}: removed (no matching commit)")
    series_file.write_text(seriesdir.render_series(names))
    touched = dict.fromkeys(path for patch in patches for path, _ in patch.files)
    pinned = seriesdir.Base(version, tuple(base.pins(source, touched).items()))
    (patches_dir / "BASE").write_text(seriesdir.render_base(pinned))
    return report


def _write(target: Path, data: bytes) -> str:
    changed = not target.is_file() or target.read_bytes() != data
    target.write_bytes(data)
    return "updated" if changed else "unchanged"


def _format_patch_command(source: Path, letter):
    """format-patch, plus --cover-letter fed from ``letter`` through a branch description;
    the letter's From (the committer) is the first commit's author, whoever runs refresh."""
    if letter is None:
        return FORMAT_PATCH, None
    branch = gitcmd.out(["symbolic-ref", "-q", "--short", "HEAD"], source, check=False)
    if not branch:
        raise usage(f"{source} has a detached HEAD; check out a branch to refresh the cover letter")
    first = gitcmd.out(
        ["log", "--reverse", "--format=%an%x00%ae", f"{base.BASE_TAG}..HEAD"], source
    )
    name, _, email = first.splitlines()[0].partition("\0")
    description = f"{letter.subject}\n\n{letter.blurb}\n"  # format-patch's subject and blurb
    command = ["-c", f"branch.{branch}.description={description}", *FORMAT_PATCH]
    command += ["--cover-letter", "--cover-from-description=subject"]
    return command, {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
