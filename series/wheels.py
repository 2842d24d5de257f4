"""Fetch sglang release wheels from PyPI once, cache them, and read upstream files out of them.

The edge to pip: ``pip download --no-deps`` into ``.cache/wheels/<version>/`` (gitignored), so
each release is downloaded at most once per checkout. Reading a wheel is plain ``zipfile``.
Not for installing anything: no wheel here is ever imported.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from series.errors import SeriesError, usage
from series.layout import wheel_member_to_upstream
from series.pins import check_version

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(os.environ.get("SGLANG_SERIES_CACHE", REPO_ROOT / ".cache"))


def wheel_path(version: str) -> Path:
    """The cached wheel of ``sglang==version``, downloading it the first time."""
    check_version(version)
    target = CACHE_DIR / "wheels" / version
    cached = sorted(target.glob(f"sglang-{version}-*.whl"))
    if cached:
        return cached[0]
    target.parent.mkdir(parents=True, exist_ok=True)
    # Download beside the cache and move in at the end: an interrupted download leaves no
    # half-written wheel that a later run would trust.
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=target.parent))
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "-q",
                "-d",
                str(staging),
                f"sglang=={version}",
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise _download_error(version, proc.stderr)
        wheels = sorted(staging.glob(f"sglang-{version}-*.whl"))
        if not wheels:
            raise SeriesError(f"pip download sglang=={version} produced no wheel in {staging}")
        target.mkdir(exist_ok=True)
        final = target / wheels[0].name
        os.replace(wheels[0], final)
        return final
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _download_error(version: str, stderr: str) -> SeriesError:
    lines = [line for line in stderr.splitlines() if line.strip() and "is ignored" not in line]
    if any("No matching distribution" in line for line in lines):
        listed = next((line for line in lines if "from versions:" in line), "")
        versions = listed.split("from versions:", 1)[-1].strip(" )").split(", ") if listed else []
        hint = f"\nlatest releases: {', '.join(versions[-8:])}" if versions else ""
        return usage(f"sglang=={version} is not on PyPI (pip found no matching release){hint}")
    tail = "\n".join(lines[-5:])
    return SeriesError(f"could not download sglang=={version} from PyPI:\n{tail}", 2)


def upstream_files(wheel: Path):
    """Yield ``(upstream path, bytes, executable)`` for every file upstream tracks."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = wheel_member_to_upstream(info.filename)
            if path is not None:
                executable = bool((info.external_attr >> 16) & 0o111)
                yield path, archive.read(info), executable


def read_upstream_file(wheel: Path, upstream_path: str):
    """The bytes of one upstream file in the wheel, or None when the release lacks it."""
    member = upstream_path.removeprefix("python/")
    with zipfile.ZipFile(wheel) as archive:
        try:
            return archive.read(member)
        except KeyError:
            return None
