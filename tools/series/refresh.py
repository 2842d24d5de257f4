"""``refresh --from DIR``: rewrite ``patches/`` from the commits on ``base`` in a ``materialize``
repository (names, cover blurb kept; BASE re-pinned), authored by whoever refreshes."""

import re
import tempfile
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, base, seriesdir, usage
from tools.series.seriesdir import COVER_NAME, NEW

# Options that keep the output independent of the user's git config and git version.
FORMAT_PATCH = (
    "-c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.renames=false format-patch "
    "--quiet --zero-commit --no-signature --no-color --src-prefix=a/ --dst-prefix=b/ --full-index"
).split()
_IDENT = re.compile(r"^(?P<name>.*) <(?P<email>[^<>]*)> \d+ [+-]\d{4}$")


def refresh(patches_dir, source) -> list:
    patches_dir, source = Path(patches_dir), Path(source).resolve()
    if not gitcmd.is_top(source):
        raise usage(f"{source} is not a git checkout made by 'materialize'")
    version = gitcmd.out(["config", base.VERSION_KEY], source, check=False)
    if not version:
        raise usage(f"{source} was not made by 'materialize' (no {base.VERSION_KEY} in its config)")
    if not gitcmd.ok(["rev-parse", "-q", "--verify", f"refs/tags/{base.BASE_TAG}"], source):
        raise usage(f"{source} has no '{base.BASE_TAG}' tag marking the pristine release")
    if dirty := gitcmd.dirty_paths(source):
        raise SeriesError(f"{source} has uncommitted changes; commit them first: {dirty[:5]}")
    on_top = f"{base.BASE_TAG}..HEAD"
    if gitcmd.out(["rev-list", "--count", on_top], source) == "0":
        raise SeriesError(f"{source} has no commits on top of '{base.BASE_TAG}'")
    if gitcmd.out(["rev-list", "--count", "--merges", on_top], source) != "0":
        raise SeriesError(f"{source} has merge commits on top of '{base.BASE_TAG}'; rebase them")
    series_file, cover_file = patches_dir / "series", patches_dir / COVER_NAME
    old_names = seriesdir.parse_series(series_file.read_text()) if series_file.is_file() else []
    letter = seriesdir.parse_cover(cover_file.read_bytes()) if cover_file.is_file() else None
    author = submitter(patches_dir.resolve().parent)
    with tempfile.TemporaryDirectory(prefix="series-refresh-") as tmp:
        authored = _authored(source, author, Path(tmp))
        command, env = list(FORMAT_PATCH), None
        if letter is not None:  # its subject and blurb through the branch description
            description = f"{letter.subject}\n\n{letter.blurb}\n"
            command = ["-c", f"branch.series.description={description}", *command]
            command += ["--cover-letter", "--cover-from-description=subject"]
            # Its From and Date are the committer's: the refresher, dated like the newest commit
            # (not the moment of the refresh: the same commits give the same bytes).
            date = gitcmd.out(["log", "-1", "--format=%ad", "--date=raw", "HEAD"], source)
            env = base.identity(*author, date)
        gitcmd.run([*command, "-o", tmp, on_top], authored, env=env)
        generated = sorted(p for p in Path(tmp).glob("*.patch") if p.name != COVER_NAME)
        names = [*old_names[: len(generated)], *(p.name for p in generated[len(old_names) :])]
        patches_dir.mkdir(parents=True, exist_ok=True)
        report, patches = [], []
        for name, path in zip(names, generated, strict=True):
            data = path.read_bytes()
            patches.append(seriesdir.parse_patch(data, name))  # never write what cannot be read
            report.append(f"{name}: {_write(patches_dir / name, data)} ({patches[-1].subject})")
        if letter is not None:
            data = (Path(tmp) / COVER_NAME).read_bytes()
            subject = seriesdir.parse_cover(data).subject
            report.append(f"{COVER_NAME}: {_write(cover_file, data)} ({subject})")
    for stale in set(old_names) - set(names):
        (patches_dir / stale).unlink(missing_ok=True)
        report.append(f"{stale}: removed (no matching commit)")
    again = "Regenerate with: python -m tools.series refresh"
    listing = "".join(f"{name}\n" for name in names)
    series_file.write_text(f"# Apply in this order (quilt series). {again}\n{listing}")
    touched = dict.fromkeys(path for patch in patches for path, _ in patch.files)
    pins = base.pins(source, touched).items()
    lines = [
        f"# The base this series is cut against. {again}",
        f"release: sglang=={version}",
        f"source: the sglang=={version} wheel, as pip download finds it on the index pip is "
        "configured for",
        "layout: upstream; python/sglang/ holds the wheel's sglang/ minus compiled extensions",
        *(f"file: {p} {d if d == NEW else 'sha256=' + d}" for p, d in pins),
    ]
    (patches_dir / "BASE").write_text("\n".join(lines) + "\n")
    return report


def submitter(project: Path) -> tuple[str, str]:
    """(name, email) git's author identity in the project's checkout, never guessed."""
    argv = ["-c", "user.useConfigOnly=true", "var", "GIT_AUTHOR_IDENT"]
    proc = gitcmd.run(argv, project, check=False)
    match = _IDENT.match(gitcmd.text(proc).strip()) if proc.returncode == 0 else None
    if match is None or not match["name"].strip() or "@" not in match["email"]:
        raise usage(
            "no git identity to author the patches: set user.name and user.email "
            "(git config) or GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL, then refresh again"
        )
    return match["name"], match["email"]


def _authored(source: Path, author: tuple, workdir: Path) -> Path:
    """A bare clone of ``source`` whose branch ``series`` holds ``base..HEAD`` again, each
    commit with its tree, message and author date, authored and committed by ``author``."""
    clone = workdir / "authored.git"
    gitcmd.run(["clone", "-q", "--bare", "--shared", str(source), str(clone)], workdir)
    parent = gitcmd.out(["rev-parse", f"{base.BASE_TAG}^{{commit}}"], source)
    for commit in gitcmd.out(["rev-list", "--reverse", f"{base.BASE_TAG}..HEAD"], source).split():
        raw = gitcmd.run(["cat-file", "commit", commit], source).stdout
        date = gitcmd.out(["log", "-1", "--format=%ad", "--date=raw", commit], source)
        tree = ["commit-tree", f"{commit}^{{tree}}", "-p", parent, "-F", "-"]
        who = base.identity(*author, date)
        parent = gitcmd.out(tree, clone, env=who, stdin=raw.partition(b"\n\n")[2])
    gitcmd.run(["update-ref", "refs/heads/series", parent], clone)
    gitcmd.run(["symbolic-ref", "HEAD", "refs/heads/series"], clone)
    return clone


def _write(target: Path, data: bytes) -> str:
    changed = not target.is_file() or target.read_bytes() != data
    target.write_bytes(data)
    return "updated" if changed else "unchanged"
