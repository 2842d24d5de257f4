"""Materialise a release as a git repository in upstream's layout, committed reproducibly.

The base is ``python/sglang/...`` from the PyPI wheel (compiled extensions left out), one
commit with a fixed identity and date, tagged ``base``. It is built once per release under
``.cache/bases/<version>`` and cloned from there (a local clone hard-links the objects), so a
``check`` costs a checkout rather than hashing 6,000 files. Not for applying patches.
"""

import os
import shutil
import tempfile
from pathlib import Path

from series import gitcmd, wheels
from series.errors import usage

BASE_TAG = "base"
VERSION_KEY = "sglang-series.version"


def commit_message(version: str) -> str:
    return (
        f"sglang {version} from PyPI\n\n"
        f"python/sglang/ is the sglang/ package of the sglang=={version} wheel, compiled\n"
        "extensions left out. Base of the sglang-overlay patch series.\n\n"
        f"Sglang-Version: {version}\n"
    )


def _build(version: str, dest: Path) -> None:
    wheel = wheels.wheel_path(version)
    for path, data, executable in wheels.upstream_files(wheel):
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
        env=gitcmd.BASE_IDENTITY,
        stdin=commit_message(version).encode(),
    )
    gitcmd.run(["tag", BASE_TAG], dest)


def cached_base(version: str) -> Path:
    """The cached base repository of ``version``, built on first use."""
    gitcmd.require_git()
    cache = wheels.CACHE_DIR / "bases" / version
    if (cache / ".git").is_dir() and gitcmd.run(
        ["rev-parse", "-q", "--verify", f"refs/tags/{BASE_TAG}"], cache, check=False
    ).returncode == 0:
        return cache
    shutil.rmtree(cache, ignore_errors=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=cache.parent))
    try:
        _build(version, staging)
        os.replace(staging, cache)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return cache


def materialize(version: str, dest) -> Path:
    """A fresh repository at ``dest`` whose HEAD (tag ``base``) is the release's base commit."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise usage(f"{dest} exists and is not empty; materialize into a new directory")
    source = cached_base(version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    gitcmd.run(["clone", "-q", "--local", str(source), str(dest)], dest.parent)
    gitcmd.run(["remote", "remove", "origin"], dest)
    gitcmd.run(["config", VERSION_KEY, version], dest)
    return dest


def base_version(repo) -> str:
    """The release a materialised repository was built from."""
    proc = gitcmd.run(["config", VERSION_KEY], repo, check=False)
    version = gitcmd.text(proc).strip()
    if proc.returncode != 0 or not version:
        raise usage(f"{repo} was not made by 'materialize' (no {VERSION_KEY} in its git config)")
    return version
