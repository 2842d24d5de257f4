"""A sglang release's wheel from PyPI (cached, never installed) as a git repository in upstream's
layout: one commit of fixed identity and date, tagged ``base``, built once and cloned from there."""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from functools import partial
from pathlib import Path

from ci import gitcmd
from tools.series import SeriesError, usage
from tools.series.seriesdir import NEW, REPO_ROOT, check_version

CACHE_DIR = Path(os.environ.get("SGLANG_SERIES_CACHE", REPO_ROOT / ".cache"))
BASE_TAG = "base"
VERSION_KEY = "sglang-series.version"


def identity(name: str, email: str, date: str) -> dict:
    """git's environment that makes ``name <email>`` at ``date`` the author and committer."""
    who = {"NAME": name, "EMAIL": email, "DATE": date}
    return {f"GIT_{role}_{k}": v for role in ("AUTHOR", "COMMITTER") for k, v in who.items()}


def built_once(target: Path, build) -> Path:
    """``target``, made the first time by ``build(folder)`` in a folder beside it and moved in
    whole, by one process at a time (another waits, then takes it): a killed build leaves none."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
            try:
                build(staging)
                os.replace(staging, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return target


def wheel_path(version: str) -> Path:
    """The cached wheel of ``sglang==version``, downloading it the first time."""
    folder = built_once(CACHE_DIR / "wheels" / check_version(version), partial(_download, version))
    return next(folder.glob(f"sglang-{version}-*.whl"))


def _download(version: str, dest: Path) -> None:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "download"]
    proc = subprocess.run(
        [*pip, "--no-deps", "--only-binary=:all:", "-d", str(dest), f"sglang=={version}"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "is ignored" not in ln]
        if any("No matching distribution" in line for line in lines):
            listed = next((line for line in lines if "from versions:" in line), "")
            versions = listed.split("from versions:", 1)[-1].strip(" )").split(", ")
            hint = f"; latest releases: {', '.join(versions[-8:])}" if listed else ""
            raise usage(f"sglang=={version} is not on PyPI (pip found no matching release){hint}")
        said = lines[-1] if lines else "pip said nothing"
        raise usage(f"could not download sglang=={version}: {said}")
    if not any(dest.glob(f"sglang-{version}-*.whl")):
        raise SeriesError(f"pip download sglang=={version} produced no wheel")


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
    # -f: a user's global excludes must not drop wheel files from the base.
    gitcmd.run(["add", "-A", "-f"], dest)
    message = (
        f"sglang {version} from PyPI\n\n"
        f"python/sglang/ is the sglang/ package of the sglang=={version} wheel, compiled\n"
        "extensions left out. Base of the sglang-overlay patch series.\n\n"
        f"Sglang-Version: {version}\n"
    )
    # the same base commit on every machine
    who = identity("sglang-overlay base", "base@sglang-overlay.invalid", "2000-01-01T00:00:00+0000")
    gitcmd.run(["commit", "-q", "--no-verify", "-F", "-"], dest, env=who, stdin=message.encode())
    gitcmd.run(["tag", BASE_TAG], dest)


def cached_base(version: str) -> Path:
    """The cached base repository of ``version``, built on first use."""
    return built_once(CACHE_DIR / "bases" / check_version(version), partial(_build, version))


def blob(repo, path: str, rev: str = BASE_TAG):
    """The bytes of ``path`` at ``rev`` of ``repo``, or None when it has no such file."""
    proc = gitcmd.run(["cat-file", "blob", f"{rev}:{path}"], repo, check=False)
    return proc.stdout if proc.returncode == 0 else None


def pins(repo, paths) -> dict:
    """Each upstream path -> the sha256 of its bytes in the base commit, or NEW when absent."""
    blobs = {path: blob(repo, path) for path in paths}
    return {path: NEW if b is None else hashlib.sha256(b).hexdigest() for path, b in blobs.items()}


def materialize(version: str, dest, only=None) -> Path:
    """A fresh repository at ``dest`` whose HEAD (tag ``base``) is the release's base commit;
    ``only`` (upstream paths): a sparse checkout of those alone (``git am`` works as in a full one)."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise usage(f"{dest} exists and is not empty; materialize into a new directory")
    source = cached_base(version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    sparse = ["--no-checkout"] if only is not None else []
    gitcmd.run(["clone", "-q", *sparse, str(source), str(dest)], dest.parent)
    if only is not None:
        # --stdin: one literal path a line, so no path is read as an option or a glob
        escaped = (
            "".join("\\" + c if c in "\\*?[!# " else c for c in p) for p in sorted(set(only))
        )
        patterns = "".join(f"/{path}\n" for path in escaped).encode()
        gitcmd.run(["sparse-checkout", "set", "--no-cone", "--stdin"], dest, stdin=patterns)
        gitcmd.run(["reset", "-q", "--hard"], dest)
    gitcmd.run(["remote", "remove", "origin"], dest)
    gitcmd.run(["config", VERSION_KEY, version], dest)
    return dest
