"""The two small text files beside the patches: ``series`` (order) and ``BASE`` (the pin).

Pure: read and render only. ``series`` is quilt's format (one patch file per line, ``#``
comments); ``BASE`` names the PyPI release the series is cut against and, per touched upstream
file, the sha256 of the base file (or ``new`` for a file the series adds), so drift in the base
is caught before a hunk fails somewhere confusing.
"""

import re
from dataclasses import dataclass

from series.cover import COVER_NAME
from series.errors import SeriesError

_NAME_RE = re.compile(r"^[0-9]{4}-[A-Za-z0-9._-]+\.patch$")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*(\.post[0-9]+|rc[0-9]+)?$")
NEW = "new"


def parse_series(text: str, where: str = "patches/series") -> list:
    names = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
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
    header = "# Apply in this order (quilt series). Regenerate with: python -m series refresh\n"
    return header + "".join(f"{name}\n" for name in names)


def check_version(version: str) -> str:
    if not _VERSION_RE.match(version):
        raise SeriesError(f"{version!r} is not a release version like 0.5.23", 2)
    return version


@dataclass(frozen=True)
class Base:
    version: str
    files: tuple  # (upstream path, sha256 hex or NEW)

    def sha256_of(self, path: str) -> str:
        return dict(self.files)[path]


def parse_base(text: str, where: str = "patches/BASE") -> Base:
    version, files = None, []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
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
        "# The base this series is cut against. Regenerate with: python -m series refresh",
        f"release: sglang=={base.version}",
        f"source: the sglang=={base.version} wheel, as pip download finds it on the index pip "
        "is configured for",
        "layout: upstream; python/sglang/ holds the wheel's sglang/ minus compiled extensions",
    ]
    for path, digest in base.files:
        lines.append(f"file: {path} {NEW if digest == NEW else 'sha256=' + digest}")
    return "\n".join(lines) + "\n"
