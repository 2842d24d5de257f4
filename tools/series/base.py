"""A sglang release from PyPI: its wheel (downloaded once into ``.cache/wheels/<version>/``,
read with ``zipfile``, never installed or imported), and that wheel as a git repository in
upstream's layout (``python/sglang/...`` minus compiled extensions, one commit with a fixed
identity and date, tagged ``base``), built once under ``.cache/bases/<version>`` and cloned
from there, so a ``check`` costs a checkout rather than hashing 6,000 files.
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, usage
from tools.series.seriesdir import NEW, REPO_ROOT, check_version

CACHE_DIR = Path(os.environ.get("SGLANG_SERIES_CACHE", REPO_ROOT / ".cache"))


BASE_TAG = "base"
VERSION_KEY = "sglang-series.version"
# A fixed identity and date make the materialised base commit the same on every machine.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "sglang-overlay base",
    "GIT_AUTHOR_EMAIL": "base@sglang-overlay.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "sglang-overlay base",
    "GIT_COMMITTER_EMAIL": "base@sglang-overlay.invalid",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


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
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "download"]
        proc = subprocess.run(
            [*pip, "--no-deps", "--only-binary=:all:", "-d", str(staging), f"sglang=={version}"],
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
        hint = f"; latest releases: {', '.join(versions[-8:])}" if versions else ""
        return usage(f"sglang=={version} is not on PyPI (pip found no matching release){hint}")
    return usage(
        f"could not download sglang=={version}: {lines[-1] if lines else 'pip said nothing'}"
    )


def upstream_files(wheel: Path):
    """Yield ``(upstream path, bytes, executable)`` for every file upstream tracks."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            if name.startswith("sglang/") and not name.endswith(("/", ".so", ".pyd", ".dylib")):
                executable = bool((info.external_attr >> 16) & 0o111)
                yield "python/" + name, archive.read(info), executable


def _build(version: str, dest: Path) -> None:
    for path, data, executable in upstream_files(wheel_path(version)):
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.chmod(target, 0o755 if executable else 0o644)
    gitcmd.run(["init", "-q", "-b", "main"], dest)
    gitcmd.run(["config", VERSION_KEY, version], dest)
    # -f: a user's global excludes must not drop wheel files from the base.
    gitcmd.run(["add", "-A", "-f"], dest)
    gitcmd.run(
        ["commit", "-q", "--no-verify", "-F", "-"],
        dest,
        env=_IDENTITY,
        stdin=(
            f"sglang {version} from PyPI\n\n"
            f"python/sglang/ is the sglang/ package of the sglang=={version} wheel, compiled\n"
            "extensions left out. Base of the sglang-overlay patch series.\n\n"
            f"Sglang-Version: {version}\n"
        ).encode(),
    )
    gitcmd.run(["tag", BASE_TAG], dest)


def cached_base(version: str) -> Path:
    """The cached base repository of ``version``, built on first use."""
    cache = CACHE_DIR / "bases" / version
    cache.parent.mkdir(parents=True, exist_ok=True)
    # One builder at a time: a second process (two series commands, a test beside the hook)
    # waits and takes the first one's cache instead of removing it under the first one's clone.
    with open(cache.parent / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (cache / ".git").is_dir() and has_base_tag(cache):
            return cache
        shutil.rmtree(cache, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=cache.parent))
        try:
            _build(version, staging)
            os.replace(staging, cache)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return cache


def has_base_tag(repo) -> bool:
    return gitcmd.ok(["rev-parse", "-q", "--verify", f"refs/tags/{BASE_TAG}"], repo)


def blob(repo, path: str):
    """The bytes of ``path`` in the base commit of ``repo``, or None when the base lacks it."""
    return commit_blob(repo, BASE_TAG, path)


def commit_blob(repo, rev: str, path: str):
    """The bytes of ``path`` at ``rev`` of ``repo``, or None when it has no such file."""
    proc = gitcmd.run(["cat-file", "blob", f"{rev}:{path}"], repo, check=False)
    return proc.stdout if proc.returncode == 0 else None


def pins(repo, paths) -> dict:
    """Each upstream path -> the sha256 of its bytes in the base commit, or NEW when absent."""
    blobs = {path: blob(repo, path) for path in paths}
    return {path: NEW if b is None else hashlib.sha256(b).hexdigest() for path, b in blobs.items()}


def materialize(version: str, dest, only=None) -> Path:
    """A fresh repository at ``dest`` whose HEAD (tag ``base``) is the release's base commit;
    with ``only`` (upstream paths), a sparse checkout of those files alone: the index and
    history are whole, so ``git am`` and ``git reset`` work as in a full tree while only the
    files they touch are written."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise usage(f"{dest} exists and is not empty; materialize into a new directory")
    source = cached_base(version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    sparse = ["--no-checkout"] if only is not None else []
    gitcmd.run(["clone", "-q", *sparse, str(source), str(dest)], dest.parent)
    if only is not None:
        # --stdin: one literal path a line, so no path is read as an option or a glob
        patterns = "".join(f"/{glob_escape(path)}\n" for path in sorted(set(only)))
        gitcmd.run(
            ["sparse-checkout", "set", "--no-cone", "--stdin"], dest, stdin=patterns.encode()
        )
        gitcmd.run(["reset", "-q", "--hard"], dest)
    gitcmd.run(["remote", "remove", "origin"], dest)
    gitcmd.run(["config", VERSION_KEY, version], dest)
    return dest


def glob_escape(path: str) -> str:
    """``path`` as a sparse-checkout pattern that matches it alone."""
    return "".join("\\" + c if c in "\\*?[!# " else c for c in path)
