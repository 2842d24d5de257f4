"""Fresh venvs of each declared Python the machine has, with the project's wheel installed."""

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
    python: Path
    site_packages: Path


def find_interpreter(version: str) -> "Path | None":
    """A real interpreter binary for ``version`` (never a pyenv shim)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(root.glob(f"{version}.*/bin/python{version}"), reverse=True)
    on_path = shutil.which(f"python{version}")
    if found or on_path is None:
        return found[0] if found else None
    probe = [on_path, "-c", "import sys; print(sys.executable)"]
    proc = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    return Path(proc.stdout.strip()) if proc.returncode == 0 else None


def build_wheel(out: Path) -> Path:
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-w", str(out), str(REPO)], check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("sglang_overlay-*.whl")
    return wheel


def make_env(interpreter: Path, version: str, wheel: Path, root: Path) -> OverlayEnv:
    """A venv of ``interpreter`` with the wheel installed into it by this venv's pip."""
    subprocess.run([str(interpreter), "-m", "venv", "--without-pip", str(root)], check=True)
    python, site = root / "bin" / "python", root / "lib" / f"python{version}" / "site-packages"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
    subprocess.run([*pip, "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)
    return OverlayEnv(python, site)


def clone_env(env: OverlayEnv, root: Path) -> OverlayEnv:
    """A copy of ``env`` at ``root``, for a test that damages its install."""
    source = Path(env.python).parent.parent
    shutil.copytree(source, root, symlinks=True)
    return OverlayEnv(root / "bin" / "python", root / env.site_packages.relative_to(source))
