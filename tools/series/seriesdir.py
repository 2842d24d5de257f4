"""``patches/`` read (``refresh`` writes it): the series, its base and cover letter; its fixes
(one upstream pull request each) and the ids (sha256 of the release and each diff) that tie a
``ci run`` to them."""

import email
import email.policy
import hashlib
import re
import tempfile
from collections import namedtuple
from dataclasses import dataclass, replace
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, usage

REPO_ROOT = Path(__file__).resolve().parents[2]
PATCHES_DIR = REPO_ROOT / "patches"
COVER_NAME = "0000-cover-letter.patch"
NEW = "new"  # BASE's digest for a file the series adds
RELEASE = re.compile(r"[0-9]+(\.[0-9]+)*(\.post[0-9]+|rc[0-9]+)?")  # fullmatch: a release
_NAME_RE = re.compile(r"^[0-9]{4}-[A-Za-z0-9._-]+\.patch$")
_COVER_SUBJECT_RE = re.compile(r"^\[PATCH 0+/(\d+)\]\s*(.+)$")
_SHORTLOG_RE = re.compile(r"^\S.* \(\d+\):$")  # git's "Author Name (2):" after a blank line


def _lines(text: str):
    """(number, line) of each line not blank once its ``#`` comment is cut."""
    for number, raw in enumerate(text.splitlines(), 1):
        if line := raw.split("#", 1)[0].strip():
            yield number, line


def parse_series(text: str, where: str = "patches/series") -> list:
    names = []
    for number, name in _lines(text):
        problem = (
            not _NAME_RE.match(name) and f"{name!r} is not a NNNN-name.patch file name"
            or name == COVER_NAME and f"{name} is the cover letter, not a patch; git am must "
            "not apply it, so the series does not list it"
            or name in names and f"{name} is listed twice"
        )  # fmt: skip
        if problem:
            raise SeriesError(f"{where}:{number}: {problem}")
        names.append(name)
    return names


def check_version(version: str) -> str:
    if not RELEASE.fullmatch(version):
        raise usage(f"{version!r} is not a release version like 0.5.23")
    return version


# The release, and each file's (upstream path, sha256 hex or NEW).
Base = namedtuple("Base", "version files")


def parse_base(text: str, where: str = "patches/BASE") -> Base:
    version, files = None, []
    for number, line in _lines(text):
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "release":
            package, _, version = value.partition("==")
            if package != "sglang" or not version:
                raise SeriesError(f"{where}:{number}: expected 'release: sglang==X.Y.Z'")
            check_version(version)
        elif key == "file":
            path, _, digest = value.partition(" ")
            digest = digest.strip().removeprefix("sha256=")
            if digest != NEW and not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise SeriesError(f"{where}:{number}: {path} needs sha256=<64 hex> or 'new'")
            files.append((path, digest))
        elif key not in ("source", "layout"):
            raise SeriesError(f"{where}:{number}: unknown key {key!r}")
    if version is None:
        raise SeriesError(f"{where}: no 'release: sglang==X.Y.Z' line")
    return Base(version, tuple(files))


def _mail(data: bytes):
    """(mbox 'From ' line or None, Subject or None, the message text) of a format-patch file."""
    mail = email.message_from_bytes(data, policy=email.policy.default)
    subject = mail["subject"]
    text = mail.get_payload(decode=True).decode("utf-8", "replace")
    return mail.get_unixfrom(), None if subject is None else str(subject), text


# The hand-written subject and blurb above git's shortlog and diffstat (refresh rewrites those);
# ``count`` is N of its [PATCH 0/N].
Cover = namedtuple("Cover", "subject blurb count")


def parse_cover(data: bytes) -> Cover:
    corrupt = f"corrupt cover letter: {COVER_NAME}"
    unixfrom, subject, text = _mail(data)
    if unixfrom is None:
        raise SeriesError(f"{corrupt}:1: not a format-patch cover letter (no 'From ' line)")
    match = _COVER_SUBJECT_RE.match(subject or "")
    if not match:
        raise SeriesError(f"{corrupt}: the subject must start with '[PATCH 0/N]'")
    lines = text.splitlines()
    shortlog = [
        i for i, ln in enumerate(lines) if i and _SHORTLOG_RE.match(ln) and not lines[i - 1].strip()
    ]
    if not shortlog:
        raise SeriesError(f"{corrupt}: no shortlog ('Author (N):') below the blurb")
    blurb, subject = "\n".join(lines[: shortlog[-1]]).strip(), match.group(2).strip()
    if not blurb or subject.startswith("*** ") or blurb.startswith("*** "):
        raise SeriesError(f"{corrupt}: the subject and blurb are still git's placeholders")
    return Cover(subject, blurb, int(match.group(1)))


# ``subject`` without its [PATCH n/m] tag, ``body`` the message above the '---' line, ``data``
# the file's bytes, ``files`` each (upstream path, added by this patch) in the order of the diff.
Patch = namedtuple("Patch", "name subject body data files")


def parse_patch(data: bytes, name: str = "<patch>") -> Patch:
    unixfrom, subject, text = _mail(data)
    if unixfrom is None:
        raise SeriesError(f"corrupt patch: {name}:1: not a git format-patch file (no 'From ' line)")
    if subject is None:
        raise SeriesError(f"corrupt patch: {name}: no Subject header")
    scratch = tempfile.gettempdir()  # outside any checkout: git apply filters by the cwd
    # -z: every path as it is, never C-quoted; NUL after each numstat entry, then the summary
    argv = ["apply", "-z", "--numstat", "--summary"]
    proc = gitcmd.run(argv, scratch, check=False, stdin=data, ceiling=scratch)
    if proc.returncode != 0:
        stat = gitcmd.text(proc).strip()
        raise SeriesError(f"corrupt patch: {name}: {stat.replace('error: ', '')}")
    *numstat, summary = proc.stdout.decode("utf-8", "replace").split("\0")
    paths = [entry.split("\t", 2)[2] for entry in numstat if entry.count("\t") == 2]
    create = [line.split(" ", 4) for line in summary.splitlines()]
    created = {words[4] for words in create if words[1:3] == ["create", "mode"]}
    body = text.split("\n---\n", 1)[0].strip()  # the diffstat follows the '---' line
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)
    return Patch(name, subject, body, data, tuple((path, path in created) for path in paths))


def diff_section(data: bytes) -> bytes:
    """From a format-patch file's first ``diff --git`` line to its end, without the signature."""
    start = data.find(b"\ndiff --git ")
    if start < 0:
        return b""
    diff = data[start + 1 :]
    end = diff.rfind(b"\n-- \n")
    return diff[: end + 1] if end >= 0 else diff


def series_id(release: str, patch_bytes) -> str:
    """sha256 of the scheme, the base release and each patch's diff section, in order."""
    digest = hashlib.sha256(f"sglang-series-id/1\nrelease: sglang=={release}\n".encode())
    for data in patch_bytes:
        section = diff_section(data)
        digest.update(b"patch %d\n" % len(section))
        digest.update(section)
    return digest.hexdigest()


@dataclass(frozen=True)
class SeriesDir:
    """The series, or one fix of it (``fixes``): a patch that changes more than ``test/`` and the
    test-only patches right after it, one upstream pull request, with an id of its own."""

    root: Path  # the patches/ directory
    names: tuple
    base: Base
    patches: tuple  # Patch, in series order
    cover: Cover | None = None

    @property
    def id(self) -> str:
        return series_id(self.base.version, (patch.data for patch in self.patches))

    @property
    def number(self) -> str:  # its first patch's number, as --fix names a fix
        return self.names[0].split("-", 1)[0]

    def touched_files(self) -> dict:
        """Every upstream path the patches touch, first-touch order -> added by them."""
        seen = {}
        for patch in self.patches:
            for path, added in patch.files:
                seen.setdefault(path, added)
        return seen

    def added_files(self) -> set:
        """The upstream paths the patches add: a fix's own tests."""
        return {path for path, added in self.touched_files().items() if added}

    @property
    def fixes(self) -> tuple:
        groups = []
        for patch in self.patches:
            if groups and patch.files and all(p.startswith("test/") for p, _ in patch.files):
                groups[-1].append(patch)
            else:
                groups.append([patch])
        return tuple(
            replace(self, names=tuple(p.name for p in g), patches=tuple(g), cover=None)
            for g in groups
        )

    def fix(self, number: str) -> "SeriesDir":
        """The fix ``--fix NUMBER`` names (its first patch's number); a usage error otherwise."""
        for fix in self.fixes:
            if number in (fix.number, fix.number.lstrip("0")):
                return fix
        known = ", ".join(f.number for f in self.fixes)
        raise usage(f"--fix {number}: the series has no fix starting at that patch ({known})")


def load(root=PATCHES_DIR) -> SeriesDir:
    root = Path(root)
    series_file, base_file, cover_file = root / "series", root / "BASE", root / COVER_NAME
    for required in (series_file, base_file):
        if not required.is_file():
            raise usage(f"{required} is missing; run 'python -m tools.series refresh'")
    names = parse_series(series_file.read_text(), str(series_file))
    if not names:
        raise SeriesError(f"{series_file} lists no patches")
    base = parse_base(base_file.read_text(), str(base_file))
    patches = []
    for name in names:
        if not (root / name).is_file():
            raise SeriesError(f"{series_file} lists {name}, but {root / name} does not exist")
        patches.append(parse_patch((root / name).read_bytes(), name))
    letter = parse_cover(cover_file.read_bytes()) if cover_file.is_file() else None
    if letter is not None and letter.count != len(names):
        raise SeriesError(
            f"{COVER_NAME} introduces {letter.count} patches, {series_file} lists "
            f"{len(names)}; run 'python -m tools.series refresh'"
        )
    return SeriesDir(root, tuple(names), base, tuple(patches), letter)


def summary(series: SeriesDir) -> dict:
    """What ``describe`` prints for ``ci run --series``: the ids, release, patches and fixes."""
    return {
        "id": series.id,
        "release": series.base.version,
        "patches": list(series.names),
        "fixes": [{"id": fix.id, "patches": list(fix.names)} for fix in series.fixes],
    }
