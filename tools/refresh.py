"""``refresh --from DIR``: rewrite ``patches/`` from the commits on top of ``base`` in DIR.

DIR is a repository made by ``materialize`` (or any checkout with a ``base`` tag and the
release recorded by materialize) where the patches were applied with ``git am``, edited and
committed. Patch N keeps the file name the series gave it, so numbering and names are stable;
a commit beyond the old series gets git's own name. ``BASE`` is rewritten with the sha256 of
every base file the series touches. Not for editing commits: use git in DIR for that.
"""

import hashlib
import tempfile
from pathlib import Path

from tools import base, gitcmd
from tools.errors import SeriesError, usage
from tools.patchfile import parse_patch
from tools.pins import NEW, Base, parse_series, render_base, render_series

# Options that keep the output independent of the user's git config and git version.
FORMAT_PATCH = [
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "diff.renames=false",
    "format-patch",
    "--quiet",
    "--zero-commit",
    "--no-signature",
    "--no-color",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--full-index",
]


def refresh(patches_dir, source) -> list:
    patches_dir, source = Path(patches_dir), Path(source).resolve()
    if not gitcmd.is_work_tree(source):
        raise usage(f"{source} is not a git checkout made by 'materialize'")
    version = base.base_version(source)
    if (
        gitcmd.run(
            ["rev-parse", "-q", "--verify", f"refs/tags/{base.BASE_TAG}"], source, check=False
        ).returncode
        != 0
    ):
        raise usage(f"{source} has no '{base.BASE_TAG}' tag marking the pristine release")
    dirty = gitcmd.dirty_paths(source)
    if dirty:
        raise SeriesError(f"{source} has uncommitted changes; commit them first: {dirty[:5]}")
    count = int(gitcmd.out(["rev-list", "--count", f"{base.BASE_TAG}..HEAD"], source))
    if count == 0:
        raise SeriesError(f"{source} has no commits on top of '{base.BASE_TAG}'")
    series_file = patches_dir / "series"
    old_names = parse_series(series_file.read_text()) if series_file.is_file() else []
    with tempfile.TemporaryDirectory(prefix="series-refresh-") as tmp:
        gitcmd.run([*FORMAT_PATCH, "-o", tmp, f"{base.BASE_TAG}..HEAD"], source)
        generated = sorted(Path(tmp).glob("*.patch"))
        names = [
            old_names[i] if i < len(old_names) else path.name for i, path in enumerate(generated)
        ]
        patches_dir.mkdir(parents=True, exist_ok=True)
        report = []
        for name, path in zip(names, generated, strict=True):
            data = path.read_bytes()
            patch = parse_patch(data, name)  # never write something we cannot read back
            target = patches_dir / name
            changed = not target.is_file() or target.read_bytes() != data
            target.write_bytes(data)
            report.append(f"{name}: {'updated' if changed else 'unchanged'} ({patch.subject})")
    for stale in set(old_names) - set(names):
        (patches_dir / stale).unlink(missing_ok=True)
        report.append(f"{stale}: removed (no matching commit)")
    series_file.write_text(render_series(names))
    (patches_dir / "BASE").write_text(render_base(_pin(source, version, patches_dir, names)))
    return report


def _pin(source: Path, version: str, patches_dir: Path, names) -> Base:
    files = {}
    for name in names:
        for diff in parse_patch((patches_dir / name).read_bytes(), name).files:
            if diff.path in files:
                continue
            blob = gitcmd.run(
                ["cat-file", "blob", f"{base.BASE_TAG}:{diff.path}"], source, check=False
            )
            files[diff.path] = (
                hashlib.sha256(blob.stdout).hexdigest() if blob.returncode == 0 else NEW
            )
    return Base(version, tuple(files.items()))
