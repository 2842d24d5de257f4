"""The release as an operator and the package index meet it: one version everywhere, and an
sdist and a wheel that ``twine check`` accepts.
"""

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from overlay_envs import REPO

import sglang_overlay


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """``python -m build`` as the release workflow runs it (the wheel built from the sdist),
    without build isolation: the pinned hatchling of this venv, no index."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_the_version_lives_in_one_place_and_every_report_shows_it(dist):
    version = sglang_overlay.__version__
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == f"sglang_overlay-{version}-py3-none-any.whl"
    cli = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "--version"], capture_output=True, text=True
    )
    assert (cli.returncode, cli.stdout.strip()) == (0, f"sglang-overlay {version}")
    heading = re.search(r"^## (\S+) ", (REPO / "CHANGELOG.md").read_text(), flags=re.M)
    assert heading[1] == version, "CHANGELOG.md's first section must be the current version"
    assert re.search(r"^version\s*=", (REPO / "pyproject.toml").read_text(), flags=re.M) is None


def test_sdist_and_wheel_pass_twine_check_and_hold_the_start_up_hook(dist):
    (sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")
    files = [sdist, wheel]
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheel_names = zipfile.ZipFile(wheel).namelist()
    assert "sglang_overlay.pth" in wheel_names  # at the top: site-packages reads it there
    assert "sglang_overlay/activation.py" in wheel_names
    with tarfile.open(sdist) as archive:
        tops = {Path(n).parts[1] for n in archive.getnames() if len(Path(n).parts) > 1}
    assert tops == {
        "sglang_overlay",
        "README.md",
        "CHANGELOG.md",
        "LICENSE",
        "pyproject.toml",
        "PKG-INFO",
        ".gitignore",
    }
