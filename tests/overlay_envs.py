"""Fresh environments of every declared Python with the overlay installed from its wheel.

The start-up hook depends on import-system details (``site``'s ``.pth`` processing, the
import lock, the finder protocol) that differ between CPython releases, so its tests run on
each of 3.10 - 3.13 that the machine has (pyenv's, or ``pythonX.Y`` on PATH). Each
environment is a ``venv`` of that interpreter with the project's wheel installed by pip, the
``.pth`` included, exactly as a user gets it; sglang and torch are the stand-ins from
``standin.py``, added to ``sys.path`` by the program under test (so ``-I`` works too).
"""

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSIONS = ("3.10", "3.11", "3.12", "3.13")


@dataclass(frozen=True)
class OverlayEnv:
    version: str
    python: Path
    site_packages: Path


def find_interpreter(version: str) -> "Path | None":
    """A real interpreter binary for ``version`` (never a pyenv shim: shims cost 50 ms)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(root.glob(f"{version}.*/bin/python{version}"), reverse=True)
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        probe = subprocess.run(
            [str(candidate), "-c", "import sys; print(sys.executable, sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if probe.returncode == 0 and f"({version.replace('.', ', ')})" in probe.stdout:
            return Path(probe.stdout.split()[0])
    return None


def build_wheel(out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["--wheel-dir", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("sglang_overlay-*.whl")
    return wheel


def make_env(interpreter: Path, version: str, wheel: Path, root: Path, *, deps=False) -> OverlayEnv:
    """A venv of ``interpreter`` with the wheel installed into it (``deps``: with the wheel's
    dependencies from the package index, for other builds than this one)."""
    subprocess.run(
        [str(interpreter), "-m", "venv", "--without-pip", str(root)], check=True, timeout=120
    )
    python = root / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # pip of the project venv installs into the other interpreter's environment.
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
        + ([] if deps else ["--no-deps", "--no-index"])
        + [str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return OverlayEnv(version, python, site)


def clone_env(env: OverlayEnv, root: Path) -> OverlayEnv:
    """A copy of ``env`` (a venv made by ``make_env``) at ``root``: the same interpreter link
    and the same files pip installed, for a test that damages its install. A copy takes
    milliseconds where a pip install takes seconds."""
    source = Path(env.python).parent.parent
    shutil.copytree(source, root, symlinks=True)
    return OverlayEnv(
        env.version, root / "bin" / "python", root / env.site_packages.relative_to(source)
    )
