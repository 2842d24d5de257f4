"""``refresh --from DIR``: rewrite ``patches/`` from the commits on top of ``base`` in a
repository made by ``materialize`` (patch N keeps its file name, ``BASE`` is re-pinned, the
cover letter keeps its subject and blurb), independent of the user's git configuration but for
one thing: the patches' author is the git identity of whoever refreshes (``submitter``), each
commit keeping its message and date.
"""

import re
import tempfile
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, base, seriesdir, usage
from tools.series.seriesdir import COVER_NAME

# Options that keep the output independent of the user's git config and git version.
FORMAT_PATCH = (
    "-c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.renames=false format-patch "
    "--quiet --zero-commit --no-signature --no-color --src-prefix=a/ --dst-prefix=b/ --full-index"
).split()


def refresh(patches_dir, source) -> list:
    """``refresh --from DIR``: DIR made by ``materialize``, with the edited commits on top of
    its ``base`` tag."""
    patches_dir, source = Path(patches_dir), Path(source).resolve()
    if not gitcmd.is_top(source):
        raise usage(f"{source} is not a git checkout made by 'materialize'")
    version = gitcmd.out(["config", base.VERSION_KEY], source, check=False)
    if not version:
        raise usage(f"{source} was not made by 'materialize' (no {base.VERSION_KEY} in its config)")
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
    author = submitter(patches_dir.resolve().parent)
    with tempfile.TemporaryDirectory(prefix="series-refresh-") as tmp:
        authored = _authored(source, author, Path(tmp))
        command, env = _format_patch_command(authored, letter)
        gitcmd.run([*command, "-o", tmp, f"{base.BASE_TAG}..HEAD"], authored, env=env)
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
    files = tuple(base.pins(source, touched).items())
    (patches_dir / "BASE").write_text(seriesdir.render_base(seriesdir.Base(version, files)))
    return report


_IDENT = re.compile(r"^(?P<name>.*) <(?P<email>[^<>]*)> \d+ [+-]\d{4}$")


def submitter(project: Path) -> tuple[str, str]:
    """(name, email) the patches are authored by: git's author identity in the project's
    checkout (GIT_AUTHOR_NAME / GIT_AUTHOR_EMAIL, else user.name / user.email), never guessed."""
    proc = gitcmd.run(
        ["-c", "user.useConfigOnly=true", "var", "GIT_AUTHOR_IDENT"], project, check=False
    )
    match = _IDENT.match(gitcmd.text(proc).strip()) if proc.returncode == 0 else None
    if match is None or not match["name"].strip() or "@" not in match["email"]:
        raise usage(
            "no git identity to author the patches: set user.name and user.email "
            "(git config) or GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL, then refresh again"
        )
    return match["name"], match["email"]


def _authored(source: Path, author: tuple, workdir: Path) -> Path:
    """A bare clone of ``source`` whose checked-out branch holds ``base..HEAD`` again, each
    commit with its tree, message and author date, authored and committed by ``author``."""
    if gitcmd.out(["rev-list", "--count", "--merges", f"{base.BASE_TAG}..HEAD"], source) != "0":
        raise SeriesError(f"{source} has merge commits on top of '{base.BASE_TAG}'; rebase them")
    clone = workdir / "authored.git"
    gitcmd.run(["clone", "-q", "--bare", "--shared", str(source), str(clone)], workdir)
    branch = gitcmd.out(["symbolic-ref", "-q", "--short", "HEAD"], source, check=False)
    parent = gitcmd.out(["rev-parse", f"{base.BASE_TAG}^{{commit}}"], source)
    commits = gitcmd.out(["rev-list", "--reverse", f"{base.BASE_TAG}..HEAD"], source).split()
    name, email = author
    for commit in commits:
        raw = gitcmd.run(["cat-file", "commit", commit], source).stdout
        message = raw.split(b"\n\n", 1)[1] if b"\n\n" in raw else b""
        date = gitcmd.out(["log", "-1", "--format=%ad", "--date=raw", commit], source)
        who = {"NAME": name, "EMAIL": email, "DATE": date}
        env = {
            f"GIT_{role}_{key}": value
            for role in ("AUTHOR", "COMMITTER")
            for key, value in who.items()
        }
        tree = f"{commit}^{{tree}}"
        parent = gitcmd.out(
            ["commit-tree", tree, "-p", parent, "-F", "-"], clone, env=env, stdin=message
        )
    head = f"refs/heads/{branch or 'series'}"
    gitcmd.run(["update-ref", head, parent], clone)
    gitcmd.run(["symbolic-ref", "HEAD", head], clone)
    return clone


def _write(target: Path, data: bytes) -> str:
    changed = not target.is_file() or target.read_bytes() != data
    target.write_bytes(data)
    return "updated" if changed else "unchanged"


def _format_patch_command(source: Path, letter):
    """format-patch, plus --cover-letter fed from ``letter`` through a branch description;
    the letter's From (the committer) is the first commit's author, whoever runs refresh."""
    if letter is None:
        return FORMAT_PATCH, None
    # ``_authored`` always checks a branch out, detached HEAD in the user's tree or not.
    branch = gitcmd.out(["symbolic-ref", "--short", "HEAD"], source)
    first = gitcmd.out(
        ["log", "--reverse", "--format=%an%x00%ae", f"{base.BASE_TAG}..HEAD"], source
    )
    name, _, email = first.splitlines()[0].partition("\0")
    description = f"{letter.subject}\n\n{letter.blurb}\n"  # format-patch's subject and blurb
    command = ["-c", f"branch.{branch}.description={description}", *FORMAT_PATCH]
    command += ["--cover-letter", "--cover-from-description=subject"]
    return command, {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
