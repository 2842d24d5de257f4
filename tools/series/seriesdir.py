"""Read ``patches/`` (``series``, ``BASE``, each patch, the cover letter) and render ``series``
and ``BASE`` back: the one place that knows the directory's formats, and how the series falls
into independent fixes (``Fix``: one upstream pull request each). An id (sha256 of the base
release and each patch's diff section) ties a ``ci run`` results folder to the series and to
each fix.
"""

import codecs
import email
import email.policy
import hashlib
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, usage

REPO_ROOT = Path(__file__).resolve().parents[2]
PATCHES_DIR = REPO_ROOT / "patches"
COVER_NAME = "0000-cover-letter.patch"
NEW = "new"  # BASE's digest for a file the series adds
TESTS = "test/"  # a patch that changes only files under it is the tests of the fix before it
ID_SCHEME = "sglang-series-id/1"
_NAME_RE = re.compile(r"^[0-9]{4}-[A-Za-z0-9._-]+\.patch$")
RELEASE = re.compile(r"[0-9]+(\.[0-9]+)*(\.post[0-9]+|rc[0-9]+)?")  # fullmatch: a release
_SUBJECT_TAG_RE = re.compile(r"^\[PATCH[^\]]*\]\s*")
_COVER_SUBJECT_RE = re.compile(r"^\[PATCH 0+/(\d+)\]\s*(.+)$")  # 00/10 from 10 patches on
_SHORTLOG_RE = re.compile(r"^\S.* \(\d+\):$")  # git's "Author Name (2):" after a blank line
_PLACEHOLDER = "*** "


def _lines(text: str):
    """(number, line) of each line that is not blank once its ``#`` comment is cut."""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line:
            yield number, line


def parse_series(text: str, where: str = "patches/series") -> list:
    names = []
    for number, line in _lines(text):
        name, *options = line.split()
        if options and options != ["-p1"]:
            raise SeriesError(f"{where}:{number}: only '-p1' is supported, got {options}")
        if not _NAME_RE.match(name):
            raise SeriesError(f"{where}:{number}: {name!r} is not a NNNN-name.patch file name")
        if name == COVER_NAME:
            raise SeriesError(
                f"{where}:{number}: {name} is the cover letter, not a patch; "
                "git am must not apply it, so the series does not list it"
            )
        if name in names:
            raise SeriesError(f"{where}:{number}: {name} is listed twice")
        names.append(name)
    return names


def render_series(names) -> str:
    header = (
        "# Apply in this order (quilt series). Regenerate with: python -m tools.series refresh\n"
    )
    return header + "".join(f"{name}\n" for name in names)


def check_version(version: str) -> str:
    if not RELEASE.fullmatch(version):
        raise usage(f"{version!r} is not a release version like 0.5.23")
    return version


@dataclass(frozen=True)
class Base:
    version: str  # the release
    files: tuple  # (upstream path, sha256 hex or NEW)

    @property
    def key(self) -> str:  # what the ids and describe name the base by
        return self.version

    def upstream_name(self) -> str:
        return f"sglang {self.version}"

    def upstream_revision(self) -> str:
        """What ``git checkout`` takes on an sglang checkout: the release's tag (sglang tags
        releases v0.5.7, v0.5.8, ...)."""
        return f"v{self.version}"


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


def render_base(base: Base) -> str:
    lines = [
        "# The base this series is cut against. Regenerate with: python -m tools.series refresh",
        f"release: sglang=={base.version}",
        f"source: the sglang=={base.version} wheel, as pip download finds it on the index pip "
        "is configured for",
        "layout: upstream; python/sglang/ holds the wheel's sglang/ minus compiled extensions",
    ]
    lines += [f"file: {p} {NEW if d == NEW else 'sha256=' + d}" for p, d in base.files]
    return "\n".join(lines) + "\n"


def _mail(data: bytes):
    """(mbox 'From ' line or None, Subject or None, the message text) of a format-patch file."""
    mail = email.message_from_bytes(data, policy=email.policy.default)
    subject = mail["subject"]
    text = mail.get_payload(decode=True).decode("utf-8", "replace")
    return mail.get_unixfrom(), None if subject is None else str(subject), text


class CoverError(SeriesError):
    """The cover letter is not what format-patch writes; the message names the problem."""


@dataclass(frozen=True)
class Cover:
    """``0000-cover-letter.patch``: a hand-written subject and blurb above git's shortlog and
    diffstat (which ``refresh`` rewrites). Not a patch: ``series`` never lists it."""

    subject: str  # without the [PATCH 0/N] tag
    blurb: str
    count: int  # N in [PATCH 0/N]


def parse_cover(data: bytes) -> Cover:
    unixfrom, subject, text = _mail(data)
    if unixfrom is None:
        raise CoverError(f"{COVER_NAME}:1: not a format-patch cover letter (no 'From ' line)")
    match = _COVER_SUBJECT_RE.match(subject or "")
    if not match:
        raise CoverError(f"{COVER_NAME}: the subject must start with '[PATCH 0/N]'")
    lines = text.splitlines()
    shortlog = [i for i, line in enumerate(lines) if i and _SHORTLOG_RE.match(line)]
    shortlog = [i for i in shortlog if not lines[i - 1].strip()]
    if not shortlog:
        raise CoverError(f"{COVER_NAME}: no shortlog ('Author (N):') below the blurb")
    blurb = "\n".join(lines[: shortlog[-1]]).strip()
    subject = match.group(2).strip()
    if not blurb or subject.startswith(_PLACEHOLDER) or blurb.startswith(_PLACEHOLDER):
        raise CoverError(f"{COVER_NAME}: the subject and blurb are still git's placeholders")
    return Cover(subject=subject, blurb=blurb, count=int(match.group(1)))


def pin_date(data: bytes, date: str) -> bytes:
    """Replace the cover letter's Date header (format-patch writes the current time)."""
    head, sep, body = data.partition(b"\n\n")
    return re.sub(rb"(?m)^Date: .*$", lambda _: b"Date: " + date.encode(), head) + sep + body


@dataclass(frozen=True)
class Patch:
    name: str
    subject: str  # without the [PATCH n/m] tag; other tags such as [DSV4] stay
    body: str  # the message above the '---' line
    data: bytes
    files: tuple  # (upstream path, added by this patch), in the order of the diff


def parse_patch(data: bytes, name: str = "<patch>") -> Patch:
    unixfrom, subject, text = _mail(data)
    if unixfrom is None:
        raise SeriesError(f"corrupt patch: {name}:1: not a git format-patch file (no 'From ' line)")
    if subject is None:
        raise SeriesError(f"corrupt patch: {name}: no Subject header")
    scratch = tempfile.gettempdir()  # outside any checkout: git apply filters by the cwd
    proc = gitcmd.run(
        ["apply", "--numstat", "--summary"], scratch, check=False, stdin=data, ceiling=scratch
    )
    stat = gitcmd.text(proc).strip()
    if proc.returncode != 0:
        raise SeriesError(f"corrupt patch: {name}: {stat.replace('error: ', '')}")
    lines = stat.splitlines()
    create = [line.split(None, 3) for line in lines if line.split()[:2] == ["create", "mode"]]
    created = {_unquoted(words[3]) for words in create}
    paths = [_unquoted(line.split("\t")[2]) for line in lines if line.count("\t") == 2]
    body = text.split("\n---\n", 1)[0].strip()  # the diffstat follows the '---' line
    files = tuple((path, path in created) for path in paths)
    return Patch(name, _SUBJECT_TAG_RE.sub("", subject), body, data, files)


def _unquoted(path: str) -> str:
    """A path as git prints it: C-quoted where it holds a quote, a control or a non-ASCII
    character (``"caf\\303\\251.py"``)."""
    if len(path) < 2 or not path[0] == path[-1] == '"':
        return path
    return codecs.escape_decode(path[1:-1].encode())[0].decode("utf-8", "replace")


def diff_section(data: bytes) -> bytes:
    """The diff part of one ``git format-patch`` file: from its first ``diff --git`` line to
    the end, without a format-patch signature. Empty for a file with no diff."""
    start = data.find(b"\ndiff --git ")
    if start < 0:
        return b""
    diff = data[start + 1 :]
    end = diff.rfind(b"\n-- \n")
    return diff[: end + 1] if end >= 0 else diff


def series_id(release: str, patch_bytes) -> str:
    """sha256 of the scheme, the base release and each patch's diff section, in order."""
    digest = hashlib.sha256(f"{ID_SCHEME}\nrelease: sglang=={release}\n".encode())
    for data in patch_bytes:
        section = diff_section(data)
        digest.update(b"patch %d\n" % len(section))
        digest.update(section)
    return digest.hexdigest()


def only_tests(patch: Patch) -> bool:
    return bool(patch.files) and all(path.startswith(TESTS) for path, _ in patch.files)


@dataclass(frozen=True)
class Fix:
    """One independent fix: a patch that changes sglang and the patches right after it that
    change only tests (its tests). Upstream takes one fix per pull request, so each is applied,
    proved and described on its own; its id, made like the series' from its own patches alone,
    is the series id of a series holding just this fix."""

    release: str
    patches: tuple  # Patch, in series order

    @property
    def number(self) -> str:
        """Its first patch's number, as ``--fix`` names it: ``0001``."""
        return self.patches[0].name.split("-", 1)[0]

    @property
    def names(self) -> tuple:
        return tuple(patch.name for patch in self.patches)

    @property
    def id(self) -> str:
        return series_id(self.release, (patch.data for patch in self.patches))

    def touched_files(self) -> dict:
        """Every upstream path the fix touches, first-touch order -> added by the fix."""
        return _touched(self.patches)


def group_fixes(release: str, patches) -> tuple:
    """The series' patches as fixes, in order: each patch that changes more than tests starts
    one, and the test-only patches after it join it (test-only patches at the start of the
    series form a group of their own)."""
    groups = []
    for patch in patches:
        if groups and only_tests(patch):
            groups[-1].append(patch)
        else:
            groups.append([patch])
    return tuple(Fix(release, tuple(group)) for group in groups)


def _touched(patches) -> dict:
    seen = {}
    for patch in patches:
        for path, added in patch.files:
            seen.setdefault(path, added)
    return seen


@dataclass(frozen=True)
class SeriesDir:
    root: Path  # the patches/ directory
    names: tuple
    base: Base
    patches: tuple  # Patch, in series order
    cover: Cover | None = None

    @property
    def id(self) -> str:
        return series_id(self.base.key, (patch.data for patch in self.patches))

    def paths(self):
        return [self.root / name for name in self.names]

    def alone(self, fix: "Fix") -> "SeriesDir":
        """The series of ``fix``'s patches alone (one pull request's branch)."""
        return replace(self, names=fix.names, patches=fix.patches)

    def touched_files(self) -> dict:
        """Every upstream path the series touches, first-touch order -> added by the series."""
        return _touched(self.patches)

    @property
    def fixes(self) -> tuple:
        return group_fixes(self.base.key, self.patches)

    def fix(self, number: str) -> Fix:
        """The fix ``--fix NUMBER`` names (its first patch's number); a usage error otherwise."""
        for fix in self.fixes:
            if number in (fix.number, fix.number.lstrip("0")):
                return fix
        known = ", ".join(f.number for f in self.fixes)
        raise usage(f"--fix {number}: the series has no fix starting at that patch ({known})")


def load(root=PATCHES_DIR) -> SeriesDir:
    root = Path(root)
    series_file, base_file = root / "series", root / "BASE"
    for required in (series_file, base_file):
        if not required.is_file():
            raise usage(f"{required} is missing; run 'python -m tools.series refresh'")
    names = parse_series(series_file.read_text(), str(series_file))
    if not names:
        raise SeriesError(f"{series_file} lists no patches")
    base = parse_base(base_file.read_text(), str(base_file))
    patches = []
    for name in names:
        path = root / name
        if not path.is_file():
            raise SeriesError(f"{series_file} lists {name}, but {path} does not exist")
        patches.append(parse_patch(path.read_bytes(), name))
    cover_file = root / COVER_NAME
    letter = None
    if cover_file.is_file():
        try:
            letter = parse_cover(cover_file.read_bytes())
        except CoverError as err:
            raise SeriesError(f"corrupt cover letter: {err}") from None
        if letter.count != len(names):
            raise SeriesError(
                f"{COVER_NAME} introduces {letter.count} patches, {series_file} lists "
                f"{len(names)}; run 'python -m tools.series refresh'"
            )
    return SeriesDir(root, tuple(names), base, tuple(patches), letter)


def describe(patches_dir) -> dict:
    """What ``python -m tools.series describe`` prints for ``ci run --series``."""
    return summary(load(patches_dir))


def summary(series: SeriesDir) -> dict:
    """The id, the base release, the patch names, and each fix's id and patch names."""
    return {
        "id": series.id,
        "release": series.base.key,
        "patches": list(series.names),
        "fixes": [{"id": fix.id, "patches": list(fix.names)} for fix in series.fixes],
    }
